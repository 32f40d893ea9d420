// runtime/cuda/cuda_switches.h - the CUDA wing's optimizations a run may turn on (WingSwitch,
// runtime/engine/optimizations.h): constants only, so that the CLI and builds without CUDA read
// them. The wing applies them when an executor is made (cuda_wing.cpp). O(1).
#pragma once

#include "runtime/engine/optimizations.h"

namespace cleave::runtime::cuda {

// Not on by default: let a CUDA device's float32 products and convolutions run on TF32 tensor
// cores. Faster, with about 1e-3 relative error, which float32's verify tolerances do not allow
// (runtime/model/tolerance.h); off, float32 stays float32 (PyTorch's default for products;
// cleave's for convolutions too).
inline constexpr WingSwitch kTf32{
    "tf32", false,
    "aten-cuda: let float32 products and convolutions use TF32 tensor cores (faster; about 1e-3 relative error, so "
    "verify compares at rtol 1e-2); by default float32 stays float32"};

inline constexpr WingSwitch kSwitches[] = {kTf32};

} // namespace cleave::runtime::cuda
