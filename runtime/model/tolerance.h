// runtime/model/tolerance.h - the tolerance a comparison holds tensors to (runtime/model/compare.h
// has the rule), as plain numbers: the cleave executable parses it (split --lower-and-run) without
// loading the runtime library. O(1).
#pragma once

#include <cstdint>

#include "runtime/engine/optimizations.h"

namespace cleave::runtime {

enum class ToleranceScale : std::uint8_t { Element, Output };

struct AllClose {
  double rtol = 1e-3, atol = 1e-7; // ONNX's backend test defaults
  ToleranceScale scale = ToleranceScale::Element;
};

// What `cleave verify`, `split --preview --backend` and `minimize` hold a cut to by default.
inline constexpr AllClose kCutTolerance{1e-4, 1e-5, ToleranceScale::Output};
// A cut run on a CUDA device with TF32 products (the CUDA wing's switch cuda::kTf32): TF32 keeps
// 10 of float32's 23 mantissa bits, so a product errs by about 1e-3 of its magnitude.
inline constexpr AllClose kTf32CutTolerance{1e-2, 1e-5, ToleranceScale::Output};

// Mixed precision (optimizations.h's Precision): products whose operands are rounded to float16
// (11 significant bits, as TF32's) or bfloat16 (8 bits: each rounding errs by up to 2^-9, about
// 2e-3), and activations carried between them in the half type, through every layer of a model.
// Measured on the CPU against float32 (bench/RESULTS.md, session 51): BERT-base's 12 layers err
// by 4.5e-4 (fp16) and 3.7e-3 (bf16) of the output's scale, the 16 zoo models by at most 1.5e-3
// and 1.3e-2; the bounds leave 4-6x room above the worst.
inline constexpr AllClose kFp16CutTolerance{1e-2, 1e-5, ToleranceScale::Output};
inline constexpr AllClose kBf16CutTolerance{5e-2, 1e-5, ToleranceScale::Output};

// What verify holds a cut to against the CPU's float32 run, unless told otherwise: float32 on any
// device at kCutTolerance (a GPU's float32 kernels reassociate sums as the CPU's do, within it);
// TF32 products (`tf32`, which only a CUDA backend accepts: cli/runtime_inputs.cpp) at
// kTf32CutTolerance; mixed precision at its half type's bound.
constexpr AllClose cutToleranceFor(bool tf32, Precision precision) {
  switch (precision) {
  case Precision::Fp16: return kFp16CutTolerance;
  case Precision::Bf16: return kBf16CutTolerance;
  case Precision::Fp32: break;
  }
  return tf32 ? kTf32CutTolerance : kCutTolerance;
}

} // namespace cleave::runtime
