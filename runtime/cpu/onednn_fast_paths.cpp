// runtime/cpu/onednn_fast_paths.cpp - the CPU wing's fast paths (runtime/engine/fast_paths.h):
// oneDNN's products, convolutions, pooling and softmax (onednn.h), each keeping what it derives
// from a weight in the node's CpuKernelState (a product's reordered or packed weight, a
// convolution's primitives per input shape), or in a state of its own for one call where the
// executor keeps no cache for the node. Offered by the wing (cpu_wing.cpp) only where the build
// has oneDNN; every operand check is onednn.h's.
#include "runtime/cpu/cpu_wing.h"

namespace cleave::runtime::cpu {
namespace {

class OneDnnFastPaths final : public FastPaths {
public:
  at::Tensor linear(KernelContext& c, const at::Tensor& x, const at::Tensor& weight, bool weightIsNK,
                    const at::Tensor& bias, ProductActivation activation) const override {
    std::shared_ptr<onednn::PackedProduct> uncached;
    CpuKernelState* state = kernelState(c);
    return onednn::linear(x, weight, weightIsNK, bias, activation, state ? state->product : uncached);
  }

  at::Tensor batchedMatmul(const at::Tensor& a, const at::Tensor& b) const override {
    return onednn::batchedMatmul(a, b);
  }

  bool holdsProductWeight(const KernelContext& c) const override {
    const CpuKernelState* state = kernelState(c);
    return state && state->packedWeight;
  }

  at::Tensor linearOnHeldWeight(KernelContext& c, const at::Tensor& x, const at::Tensor& bias,
                                ProductActivation activation) const override {
    CpuKernelState& state = *kernelState(c); // holdsProductWeight(c) said it holds one
    const std::int64_t n = onednn::packedWeightDims(*state.packedWeight)[1];
    const bool takesBias =
        !bias.defined() || (bias.dim() == 1 && bias.size(0) == n && bias.scalar_type() == x.scalar_type());
    if (x.dim() < 2 || !takesBias)
      return {};
    return onednn::linearPacked(x, state.packedWeight, bias, activation, state.product);
  }

  at::Tensor heldProductWeight(const KernelContext& c) const override {
    return onednn::unpackWeight(*kernelState(c)->packedWeight);
  }

  at::Tensor softmax(const at::Tensor& x, std::int64_t axis, bool logarithm, bool inPlace) const override {
    return onednn::softmax(x, axis, logarithm, inPlace);
  }

  at::Tensor pool(const at::Tensor& x, const PoolWindow& window, bool mayReturnPrivate) const override {
    return onednn::pool(x, window.kind, window.kernel, window.strides, window.padBegin, window.padEnd, window.dilations,
                        window.ceil, mayReturnPrivate);
  }

  at::Tensor convolution(KernelContext& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                         const ConvolutionWindow& window, const ConvolutionEpilogue& epilogue,
                         const at::Tensor& residual, bool residualIsScratch, bool mayReturnPrivate) const override {
    if (w.dim() != 4 && w.dim() != 5)
      return {};
    onednn::ConvolutionCache uncached;
    CpuKernelState* state = kernelState(c);
    onednn::ConvolutionCache& cache = state ? state->convolutions : uncached;
    return onednn::convolution(x, w, bias, window.strides, window.padBegin, window.padEnd, window.dilations,
                               window.groups, epilogue, residual, residualIsScratch,
                               onednn::cacheEntryFor(cache, x.sizes()), &cache, mayReturnPrivate);
  }

  at::Tensor transposedConvolution(KernelContext& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                                   const ConvolutionWindow& window, bool thenRelu) const override {
    if (w.dim() != 4)
      return {};
    onednn::ConvolutionCache uncached;
    CpuKernelState* state = kernelState(c);
    onednn::ConvolutionCache& cache = state ? state->convolutions : uncached;
    return onednn::transposedConvolution2d(x, w, bias, window.strides, window.padBegin, window.padEnd,
                                           window.dilations, window.outputPadding, window.groups, thenRelu,
                                           onednn::cacheEntryFor(cache, x.sizes()), &cache);
  }

  // oneDNN's batched products and softmax: faster than ATen's CPU flash attention
  // (bench/RESULTS.md, "fused attention").
  bool attentionAsSteps() const override { return true; }

  at::Tensor plainWeight(const KernelContext& c, const at::Tensor& standIn) const override {
    const CpuKernelState* state = kernelState(c);
    return state ? onednn::plainWeight(*state->convolutions.weights, standIn) : at::Tensor();
  }
};

const OneDnnFastPaths theFastPaths;

} // namespace

const FastPaths* oneDnnFastPaths() { return onednn::available() ? &theFastPaths : nullptr; }

} // namespace cleave::runtime::cpu
