// runtime/model/compare.h - the one rule cleave compares tensors by, in two scales:
//   |actual - expected| <= atol + rtol * s,   NaN equals NaN, an infinity only itself, where
//   - ToleranceScale::Element: s = |expected| of that element (numpy's allclose; the rule ONNX's
//     backend test runner uses for single ops);
//   - ToleranceScale::Output: s = the largest finite |expected| of the whole output (a normwise
//     bound, as LAPACK's tests check a product). A cut model, fused and unfused runs, oneDNN and
//     ONNX Runtime sum the same terms in other orders; float32 reassociation errs by about
//     eps * (the magnitudes that flow into an element), which an element near zero does not show
//     (efficientnet_b0: 0.05898 against 0.05823 in an output reaching 58, 1.3e-5 of the scale).
//     A real difference (a wrong op, a swapped operand, a lost transpose) moves elements by a
//     fraction of the scale and still fails.
// Both figures are reported whichever decides. The result names the worst element (largest excess
// over the bound) by its index. Shapes and dtypes must match; integers and booleans always take
// the Element scale (an index is right or wrong whatever its neighbours' size), so they compare
// exactly when atol < 1 and rtol * |expected| < 1. Sequences (nested tensors) compare element by element, empty optionals
// (undefined tensors) only with each other. O(elements).
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "runtime/model/tolerance.h"

namespace cleave::runtime {

struct Comparison {
  bool equal = true;
  std::string message; // why not: shape, dtype, or the worst element with its index and values
  double maxAbs = 0.0;  // largest |actual - expected|
  double outputScale = 0.0;   // largest finite |expected|
  double maxElementRel = 0.0; // largest |actual - expected| / |expected| (0 where expected is 0)
  std::int64_t pastElementwise = 0; // elements past atol + rtol * |expected| (the Element rule)
  std::vector<std::int64_t> worstIndex{};
  // maxAbs / outputScale (maxAbs itself when the scale is 0): the normwise relative error.
  double scaledError() const { return outputScale > 0 ? maxAbs / outputScale : maxAbs; }
};

Comparison compareTensors(const at::Tensor& actual, const at::Tensor& expected, const AllClose& tolerance = {});

} // namespace cleave::runtime
