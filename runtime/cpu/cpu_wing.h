// runtime/cpu/cpu_wing.h - the CPU wing: oneDNN's weight layouts and blocked activations offered to
// the engine through its hooks (runtime/engine/device_wing.h), and the state a CPU kernel keeps per
// node. The wing installs itself (cpu_wing.cpp); nothing in the engine names it.
//
// Fast paths (runtime/engine/fast_paths.h), which the shared kernels ask for before computing on
// ATen: products, convolutions, pooling and softmax on oneDNN where the build has libdnnl
// (onednn_fast_paths.cpp); else 2-D convolutions and max pooling in ATen's own blocked layout
// (aten_blocked_fast_paths.cpp).
//
// Private layout: oneDNN's blocked activations (onednn.h), or ATen's blocked (mkldnn) tensors in
// a build without libdnnl. Only this wing makes either; the engine asks it for their dense form.
//
// Weight plan (inference on the CPU in float32, built with libdnnl; otherwise every weight is held
// as loaded):
//   - a [K, N] float32 parameter that only MatMuls read, as their right operand, is stored as [N, K]
//     rows, the layout onednn::linear computes with, or packed in oneDNN's own product layout as
//     the only copy where that layout is blocked (onednn::packsProductWeight);
//   - a float32 parameter that only convolutions read, as their weight, on oneDNN, and not through
//     a fused normalization, is held only in its convolutions' layouts (onednn::holdOnlyReordered).
// Complexity: planning is O(nodes + operands); hooks are O(1) but for the conversions they make.
#pragma once

#include <memory>

#include "runtime/cpu/onednn.h"
#include "runtime/engine/device_wing.h"
#include "runtime/engine/fast_paths.h"
#include "runtime/engine/kernel.h"

namespace cleave::runtime::cpu {

// What a CPU kernel keeps between runs of its node, beside the engine's KernelCache fields.
struct CpuKernelState : DeviceKernelState {
  std::shared_ptr<onednn::PackedProduct> product; // a product's reordered weight and primitive
  onednn::ConvolutionCache convolutions;          // per input shape (nodes sharing a weight run at several)
  // A product's right operand when the executor holds that weight only packed (its operand is
  // then undefined; the fast paths' held product weight, read by productWeight() and matmul()).
  std::shared_ptr<const onednn::PackedWeight> packedWeight;
  // A convolution's weight reordered for ATen's blocked convolution (a build without libdnnl), and
  // the weight tensor it came from.
  at::Tensor atenBlockedWeight, atenBlockedWeightSource;
};

// The node's CPU state; null when the executor keeps no cache for it or runs off the CPU wing.
CpuKernelState* kernelState(const KernelContext& c);

// oneDNN's fast paths (onednn_fast_paths.cpp); null in a build without it.
const FastPaths* oneDnnFastPaths();
// ATen's blocked convolutions and max pooling (aten_blocked_fast_paths.cpp): the wing's fast
// paths where oneDNN's are null.
const FastPaths* atenBlockedFastPaths();

} // namespace cleave::runtime::cpu
