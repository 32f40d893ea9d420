// runtime/engine/fast_paths.h - the computations a device wing offers the shared kernels
// (runtime/kernels/) in its own way: products, convolutions, pooling and softmax on the device's
// own library (the CPU wing: oneDNN, its weights reordered once and kept in the node's
// DeviceKernelState). The kernels stay the one home of every op's ONNX semantics (attributes,
// pads, fallbacks) and ask the wing serving the operands' device first; every hook returns an
// undefined tensor where the wing does not take the operands, and the kernel then computes on
// ATen. The model is ONNX Runtime's execution providers, whose kernels override the CPU
// provider's op by op; here the override is one level down, at the shared computation, so that
// MatMul, Gemm, Einsum, attention and their fused groups all reach one product.
// A wing with no fast paths returns none from DeviceWing::fastPaths; the CUDA wing's are few
// (ATen's CUDA kernels are cuBLAS's and cuDNN's already: a product's epilogue in cuBLASLt);
// nothing here names a device library.
// Complexity: fastPathsFor scans the installed wings (a handful); each hook says its own.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace cleave::runtime {

class KernelContext;

// What a product does to its output inside the same call (a fused MatMul+Add's activation):
// GELU exact (erf) or as its tanh approximation, or Relu.
enum class ProductActivation : std::uint8_t { None, Gelu, GeluTanh, Relu };

// `out` activated in place (it must be the caller's own tensor); returned for chaining.
inline at::Tensor& activateInPlace(at::Tensor& out, ProductActivation activation) {
  switch (activation) {
  case ProductActivation::None: break;
  case ProductActivation::Gelu: at::gelu_(out); break;
  case ProductActivation::GeluTanh: at::gelu_(out, "tanh"); break;
  case ProductActivation::Relu: at::relu_(out); break;
  }
  return out;
}

// What a convolution does to its output inside the same kernel, in order: add a residual tensor
// of the output's shape (a ResNet block's Add), then an activation.
struct ConvolutionEpilogue {
  // HardSigmoid: clip(alpha x + beta, 0, 1); Swish: x * sigmoid(x) (SiLU).
  enum class Activation : std::uint8_t { None, Relu, Clip, HardSwish, HardSigmoid, Swish };
  bool addResidual = false;
  Activation activation = Activation::None;
  float clipLow = 0.0f, clipHigh = 0.0f; // Clip's bounds
  float alpha = 0.0f, beta = 0.0f;       // HardSigmoid's
  friend bool operator==(const ConvolutionEpilogue&, const ConvolutionEpilogue&) = default;
};

// A convolution's window over x [N, C, spatial...]: per spatial dim, strides, dilations and pads
// at either end (possibly asymmetric; negative only for ConvTranspose's crops), and its groups.
// outputPadding: ConvTranspose's extra rows at the end of each dim (empty for Conv).
struct ConvolutionWindow {
  std::vector<std::int64_t> strides, dilations, padBegin, padEnd, outputPadding;
  std::int64_t groups = 1;
};

// Max pooling (padding never wins), or average pooling counting the padding or not.
enum class PoolKind : std::uint8_t { Max, AverageWithPadding, AverageWithoutPadding };

// A pooling window over x [N, C, spatial...]: per spatial dim, the kernel, strides, dilations and
// pads at either end; `ceil` rounds the output size up as ATen and ONNX do.
struct PoolWindow {
  PoolKind kind = PoolKind::Max;
  std::vector<std::int64_t> kernel, strides, dilations, padBegin, padEnd;
  bool ceil = false;
};

class FastPaths {
public:
  virtual ~FastPaths() = default;
  // x[..., K] times a 2-D weight ([N, K] when `weightIsNK`, else [K, N]), plus an optional 1-D
  // bias [N], then `activation`; what the wing derives from the weight is kept
  // in c's node state while the same weight tensor comes back.
  virtual at::Tensor linear(KernelContext& c, const at::Tensor& x, const at::Tensor& weight, bool weightIsNK,
                            const at::Tensor& bias, ProductActivation activation) const = 0;
  // a[..., M, K] times b[..., K, N] with numpy broadcasting of the batch dims (both rank >= 2).
  virtual at::Tensor batchedMatmul(const at::Tensor& a, const at::Tensor& b) const = 0;
  // Whether c's node reads its product weight from the wing alone (WeightPlan::adopt bound no
  // tensor for it: the operand is undefined); then these two read it.
  virtual bool holdsProductWeight(const KernelContext& c) const = 0;
  // linear() of x by that held [K, N] weight, plus an optional bias, then `activation`; undefined where the
  // wing does not take the operands (the caller then reads heldProductWeight).
  virtual at::Tensor linearOnHeldWeight(KernelContext& c, const at::Tensor& x, const at::Tensor& bias,
                                        ProductActivation activation) const = 0;
  // A dense [K, N] copy of the held weight (one conversion per call).
  virtual at::Tensor heldProductWeight(const KernelContext& c) const = 0;
  // Softmax (or its logarithm) along `axis`; written over x when `inPlace` (x is the caller's to
  // overwrite).
  virtual at::Tensor softmax(const at::Tensor& x, std::int64_t axis, bool logarithm, bool inPlace) const = 0;
  // 2-D or 3-D pooling of x [N, C, (D,) H, W] in x's own layout; x may be in the wing's private
  // layout for Max pooling, whose output stays so with `mayReturnPrivate`.
  virtual at::Tensor pool(const at::Tensor& x, const PoolWindow& window, bool mayReturnPrivate) const = 0;
  // Conv of x [N, C, (D,) H, W] (channels-last dense, or in the wing's private layout) by
  // w [OC, C / groups, (KD,) KH, KW] plus an optional bias [OC], then `epilogue` (`residual` when it
  // adds one, which the wing may overwrite when `residualIsScratch`). The output may be in the
  // wing's private layout only with `mayReturnPrivate`.
  virtual at::Tensor convolution(KernelContext& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                                 const ConvolutionWindow& window, const ConvolutionEpilogue& epilogue,
                                 const at::Tensor& residual, bool residualIsScratch, bool mayReturnPrivate) const = 0;
  // ConvTranspose of x [N, IC, H, W] by w [IC, OC / groups, KH, KW] plus an optional bias, then Relu
  // when `thenRelu` (2-D only).
  virtual at::Tensor transposedConvolution(KernelContext& c, const at::Tensor& x, const at::Tensor& w,
                                           const at::Tensor& bias, const ConvolutionWindow& window,
                                           bool thenRelu) const = 0;
  // Whether a fused attention group (fusion.h) runs faster as its steps, on this wing's batched
  // products and softmax, than as ATen's fused scaled_dot_product_attention (bench/RESULTS.md,
  // "fused attention").
  virtual bool attentionAsSteps() const = 0;
  // The dense weight behind `standIn`, a weight the wing holds only in its own layouts (a meta
  // tensor its WeightPlan bound), for a kernel that computes on ATen; undefined when it is not
  // one of the wing's stand-ins in c's executor.
  virtual at::Tensor plainWeight(const KernelContext& c, const at::Tensor& standIn) const = 0;
};

// The fast paths of the wing serving `device`, or null where it offers none (or none serves it).
// Under autocast (mixed precision) a wing offers only paths that take autocast's types: the CPU
// wing's float32 paths step aside, and ATen's dispatcher picks each op's type.
const FastPaths* fastPathsFor(const at::Device& device);

} // namespace cleave::runtime
