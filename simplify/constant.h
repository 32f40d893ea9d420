// simplify/constant.h - small constant tensors and the ONNX ops that exporters write as shape
// arithmetic, evaluated on them (no ATen: the core folds graphs before any runtime exists).
//
// A Constant holds integral and bool elements as int64 and floating ones as double, in row-major
// order; bytes() writes them in their dtype, little-endian, as an initializer holds them.
// evaluateOp computes one node of the ai.onnx ops listed in foldableOps() from constant inputs,
// following the ONNX spec of the node's opset (Unsqueeze/Squeeze/Slice read axes from attributes
// before opsets 13/13/10, from inputs after); integer Div truncates toward zero, as ONNX Runtime's.
// It answers nothing (std::nullopt) for what it cannot fold exactly: a division by zero, an
// index out of range, a result over `maxElements`, a dtype it does not hold (strings, complex,
// 16-bit floats).
// Complexity: linear in the elements of the inputs and the result.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace cleave::simplify {

struct Constant {
  ir::DType dtype = ir::DType::Undefined;
  std::vector<std::int64_t> dims;
  std::vector<std::int64_t> ints; // integral and bool dtypes
  std::vector<double> reals;      // F32 and F64
  bool floating() const { return dtype == ir::DType::F32 || dtype == ir::DType::F64; }
  std::int64_t numel() const;
  // The elements in `dtype`, little-endian (an initializer's raw bytes).
  std::string bytes() const;
  friend bool operator==(const Constant&, const Constant&) = default;
};

// Whether the dtype is one a Constant holds (integral, bool, F32, F64).
bool holdsDType(ir::DType dtype);
// A constant from raw initializer bytes; nullopt for a dtype it does not hold or a size mismatch.
std::optional<Constant> constantFromBytes(ir::DType dtype, std::vector<std::int64_t> dims, std::string_view bytes);

// The op types evaluateOp folds (ai.onnx), sorted.
std::span<const std::string_view> foldableOps();

struct OpToFold {
  std::string_view opType;
  std::int64_t opset = 0;
  std::span<const ir::Attribute> attributes;
  std::vector<const Constant*> inputs; // nullptr for an omitted optional input
  std::size_t outputs = 1;
};
// The node's outputs, or nullopt when it cannot be folded exactly (see the header).
std::optional<std::vector<Constant>> evaluateOp(const OpToFold& op, std::int64_t maxElements);

} // namespace cleave::simplify
