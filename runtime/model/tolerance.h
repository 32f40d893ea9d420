// runtime/model/tolerance.h - the tolerance a comparison holds tensors to (runtime/model/compare.h
// has the rule), as plain numbers: the cleave executable parses it (split --lower-and-run) without
// loading the runtime library. O(1).
#pragma once

#include <cstdint>

namespace cleave::runtime {

enum class ToleranceScale : std::uint8_t { Element, Output };

struct AllClose {
  double rtol = 1e-3, atol = 1e-7; // ONNX's backend test defaults
  ToleranceScale scale = ToleranceScale::Element;
};

// What `cleave verify`, `split --preview --backend` and `minimize` hold a cut to by default.
inline constexpr AllClose kCutTolerance{1e-4, 1e-5, ToleranceScale::Output};

} // namespace cleave::runtime
