#include "ir/types.h"

#include <algorithm>
#include <array>

#include "base/checked_math.h"

namespace cleave::ir {
namespace {
struct DTypeInfo {
  std::string_view name;
  int size;
};
constexpr std::array<DTypeInfo, kMaxDTypeCode + 1> kDTypes = {{
    {"undefined", 0}, {"f32", 4}, {"u8", 1}, {"i8", 1}, {"u16", 2}, {"i16", 2}, {"i32", 4},
    {"i64", 8}, {"string", 0}, {"bool", 1}, {"f16", 2}, {"f64", 8}, {"u32", 4}, {"u64", 8},
    {"c64", 8}, {"c128", 16}, {"bf16", 2}, {"f8e4m3fn", 1}, {"f8e4m3fnuz", 1}, {"f8e5m2", 1},
    {"f8e5m2fnuz", 1}, {"u4", 0}, {"i4", 0}, {"f4e2m1", 0}, {"f8e8m0", 1}, {"u2", 0}, {"i2", 0},
}};
} // namespace

int dtypeSize(DType dtype) { return kDTypes[static_cast<int>(dtype)].size; }
std::string_view dtypeName(DType dtype) { return kDTypes[static_cast<int>(dtype)].name; }

std::optional<DType> parseDTypeName(std::string_view name) {
  for (int code = 0; code <= kMaxDTypeCode; ++code)
    if (kDTypes[code].name == name)
      return static_cast<DType>(code);
  return dtypeFromTorch(name);
}

std::optional<DType> dtypeFromOnnx(int code) {
  if (code < 0 || code > kMaxDTypeCode)
    return std::nullopt;
  return static_cast<DType>(code);
}

std::optional<DType> dtypeFromTorch(std::string_view name) {
  if (name.starts_with("torch."))
    name.remove_prefix(6);
  struct Alias {
    std::string_view torchName;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"float32", DType::F32}, {"float", DType::F32},     {"float16", DType::F16},
      {"half", DType::F16},    {"bfloat16", DType::BF16}, {"float64", DType::F64},
      {"double", DType::F64},  {"int8", DType::I8},       {"uint8", DType::U8},
      {"int16", DType::I16},   {"short", DType::I16},     {"int32", DType::I32},
      {"int", DType::I32},     {"int64", DType::I64},     {"long", DType::I64},
      {"bool", DType::Bool},   {"complex64", DType::C64}, {"complex128", DType::C128},
  };
  for (const Alias& alias : kAliases)
    if (alias.torchName == name)
      return alias.dtype;
  return std::nullopt;
}

std::string_view valueKindName(ValueKind kind) {
  switch (kind) {
  case ValueKind::Tensor: return "tensor";
  case ValueKind::Sequence: return "sequence";
  case ValueKind::Shape: return "shape";
  case ValueKind::Scalar: return "scalar";
  case ValueKind::None: return "none";
  case ValueKind::Other: return "other";
  case ValueKind::Unknown: return "unknown";
  }
  return "unknown";
}

bool Shape::isStatic() const {
  if (!rankKnown)
    return false;
  for (const Dim& dim : dims)
    if (!dim.isKnown())
      return false;
  return true;
}

std::int64_t Shape::numElements() const {
  if (!isStatic())
    return -1;
  std::int64_t count = 1;
  for (const Dim& dim : dims) {
    std::optional<std::int64_t> next = checkedMul(count, dim.extent);
    if (!next)
      return -1;
    count = *next;
  }
  return count;
}

std::string formatShape(const Shape& shape) {
  if (!shape.rankKnown)
    return "[*]";
  std::string text = "[";
  for (std::size_t i = 0; i < shape.dims.size(); ++i) {
    if (i)
      text += ',';
    const Dim& dim = shape.dims[i];
    text += dim.isKnown() ? std::to_string(dim.extent) : (dim.symbol.empty() ? "?" : dim.symbol);
  }
  return text + "]";
}

ValueType ValueType::tensor(DType dtype, std::vector<std::int64_t> dims) {
  ValueType type;
  type.kind = ValueKind::Tensor;
  type.dtype = dtype;
  type.shape.rankKnown = true;
  for (std::int64_t extent : dims)
    type.shape.dims.push_back(Dim{extent, {}});
  return type;
}

std::int64_t byteSizeOf(const ValueType& type) {
  if (type.bytes >= 0)
    return type.bytes;
  if (type.kind != ValueKind::Tensor)
    return -1;
  std::int64_t elements = type.shape.numElements();
  int size = dtypeSize(type.dtype);
  if (elements < 0 || size == 0)
    return -1;
  return checkedMul(elements, size).value_or(-1);
}

Status checkTensorSize(const ValueType& type, std::string_view what) {
  if (type.kind != ValueKind::Tensor || !type.shape.rankKnown)
    return {};
  std::int64_t bytes = std::max(dtypeSize(type.dtype), 1);
  for (const Dim& dim : type.shape.dims) {
    if (!dim.isKnown())
      continue;
    std::optional<std::int64_t> next = checkedMul(bytes, dim.extent);
    if (!next)
      return Error(ErrorCode::InvalidArgument) << what << " has shape " << formatShape(type.shape)
                                               << ", whose size in bytes overflows 64 bits";
    bytes = *next;
  }
  return {};
}

} // namespace cleave::ir
