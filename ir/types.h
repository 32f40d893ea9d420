// ir/types.h - element types, value kinds and shapes carried by IR values.
// Complexity: every query is O(rank).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.h"

namespace cleave::ir {

// Element types. The numeric values are ONNX's TensorProto.DataType codes so conversions are
// trivial; FX dtypes map onto the same set (torch.float32 -> F32, torch.bool -> Bool, ...).
enum class DType : std::uint8_t {
  Undefined = 0, F32 = 1, U8 = 2, I8 = 3, U16 = 4, I16 = 5, I32 = 6, I64 = 7, String = 8,
  Bool = 9, F16 = 10, F64 = 11, U32 = 12, U64 = 13, C64 = 14, C128 = 15, BF16 = 16,
  // 8-bit floats (opset 19; e8m0, opset 24: a power-of-two scale) and sub-byte types (opset 21 on),
  // which ONNX packs two or four to a byte.
  F8E4M3FN = 17, F8E4M3FNUZ = 18, F8E5M2 = 19, F8E5M2FNUZ = 20, U4 = 21, I4 = 22, F4E2M1 = 23, F8E8M0 = 24,
  U2 = 25, I2 = 26,
};
constexpr int kMaxDTypeCode = 26;

// Bytes per element; 0 for Undefined, String (no fixed size) and the sub-byte types.
int dtypeSize(DType dtype);
// An 8-bit float (opsets 19 and 24).
constexpr bool isFloat8(DType dtype) {
  return dtype == DType::F8E4M3FN || dtype == DType::F8E4M3FNUZ || dtype == DType::F8E5M2 ||
         dtype == DType::F8E5M2FNUZ || dtype == DType::F8E8M0;
}
// A type ONNX packs several to a byte (int4, uint4, float4e2m1, int2, uint2). cleave reads none of
// them yet: no ATen tensor type holds them element by element.
constexpr bool isSubByte(DType dtype) {
  return dtype == DType::U4 || dtype == DType::I4 || dtype == DType::F4E2M1 || dtype == DType::U2 || dtype == DType::I2;
}
// A real floating type (what training can differentiate): f16, bf16, f32, f64.
constexpr bool isFloating(DType dtype) {
  return dtype == DType::F16 || dtype == DType::BF16 || dtype == DType::F32 || dtype == DType::F64;
}
// Short lower-case name used in text, JSON and profiles: "f32", "i64", "bool", ...
std::string_view dtypeName(DType dtype);
std::optional<DType> parseDTypeName(std::string_view name);
// ONNX TensorProto.DataType code to DType; nullopt for unknown codes.
std::optional<DType> dtypeFromOnnx(int code);
// torch dtype spelling ("torch.float32", "float32") to DType.
std::optional<DType> dtypeFromTorch(std::string_view name);

// What a value is. Tensors carry dtype and shape; the others are FX's non-tensor values.
enum class ValueKind : std::uint8_t {
  Tensor,   // dense tensor with dtype and shape
  Sequence, // tuple/list (FX) or ONNX sequence/optional type
  Shape,    // torch.Size or a tuple of ints describing a shape
  Scalar,   // int, float, bool
  None,     // Python None
  Other,    // anything else; its type name is kept
  Unknown,  // no type information
};
std::string_view valueKindName(ValueKind kind);

// One dimension: a known extent, or a symbol (ONNX dim_param such as "batch"), or unknown.
struct Dim {
  std::int64_t extent = -1; // >= 0 when known
  std::string symbol;       // non-empty for a named symbolic dim
  bool isKnown() const { return extent >= 0; }
  friend bool operator==(const Dim&, const Dim&) = default;
};

// Shape of a tensor value; `rankKnown` false means even the rank is unknown.
struct Shape {
  bool rankKnown = false;
  std::vector<Dim> dims;
  bool isStatic() const;
  // Number of elements, or -1 when a dim is not static.
  std::int64_t numElements() const;
  friend bool operator==(const Shape&, const Shape&) = default;
};

// "[4,16]", "[batch,?,3]", "[?]" (unknown rank), "[]" (scalar).
std::string formatShape(const Shape& shape);

// The full type of a value, as a plain struct for builders and readers.
struct ValueType {
  ValueKind kind = ValueKind::Unknown;
  DType dtype = DType::Undefined;
  Shape shape;
  std::string typeName;      // Python type for non-tensor FX values, ONNX type for non-tensors
  std::int64_t bytes = -1;   // explicit size (e.g. a tuple of tensors); -1 = derive from shape
  static ValueType tensor(DType dtype, std::vector<std::int64_t> dims);
  friend bool operator==(const ValueType&, const ValueType&) = default;
};

// Byte size of a value of this type: explicit bytes, else elements * element size, else -1
// (also when that product would overflow; readers refuse such types with checkTensorSize).
std::int64_t byteSizeOf(const ValueType& type);

// Refuses a tensor type whose static dims multiply, with the element size, past int64: readers call
// it on every declared type and initializer, so sizes computed later cannot overflow. Fails:
// InvalidArgument naming `what` and the shape.
Status checkTensorSize(const ValueType& type, std::string_view what);

} // namespace cleave::ir
