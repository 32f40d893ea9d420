// runtime/compare.h - the one rule cleave compares tensors by: numpy's allclose,
//   |actual - expected| <= atol + rtol * |expected|   (element-wise; NaN equals NaN),
// the rule ONNX's backend test runner uses. The result names the worst element (largest excess
// over the bound) by its index. Shapes and dtypes must match; integers and booleans compare
// exactly when atol < 1. Sequences (nested tensors) compare element by element, empty optionals
// (undefined tensors) only with each other. O(elements).
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace cleave::runtime {

struct AllClose {
  double rtol = 1e-3, atol = 1e-7; // ONNX's backend test defaults
};

struct Comparison {
  bool equal = true;
  std::string message; // why not: shape, dtype, or the worst element with its index and values
  double maxAbs = 0.0;  // largest |actual - expected|
  std::vector<std::int64_t> worstIndex{};
};

Comparison compareTensors(const at::Tensor& actual, const at::Tensor& expected, const AllClose& tolerance = {});

} // namespace cleave::runtime
