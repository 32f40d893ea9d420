// runtime/cpu/aten_blocked_fast_paths.cpp - the CPU wing's fast paths in a build without libdnnl
// (runtime/engine/fast_paths.h): 2-D float32 convolutions and max pooling in ATen's own blocked
// layout (mkldnn tensors, the oneDNN that libtorch bundles), its reordered weight kept in the
// node's CpuKernelState. ATen's blocked tensors are then the wing's private layout
// (cpu_wing.cpp), so a chain of convolutions, their residual Adds and Relus (fused into them) and
// max pooling stays blocked. Products, softmax and transposed convolutions are ATen's dense ones
// (every such hook answers "not here").
// Complexity: a convolution's first call with a weight reorders it, O(weight); each call converts
// a dense input to the blocked layout, O(input), and a blocked output back only where its readers
// need it dense.
#include "runtime/cpu/cpu_wing.h"

#include <algorithm>

namespace cleave::runtime::cpu {
namespace {
using Activation = ConvolutionEpilogue::Activation;

// Whether oneDNN computes this tensor in ATen's blocked layout: float32 on the CPU, recording no
// autograd (blocked tensors and reordered weights record no backward), or blocked already.
bool blockable(const at::Tensor& t) {
  return at::hasMKLDNN() && t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat && !t.requires_grad();
}

at::Tensor toBlocked(const at::Tensor& t) { return t.is_mkldnn() ? t : t.to_mkldnn(); }

// Whether a window's pads are ATen's implicit ones: equal at both ends, at most half the kernel
// (`kernel` empty: any size, as a convolution's).
bool implicitPads(const std::vector<std::int64_t>& begin, const std::vector<std::int64_t>& end,
                  const std::vector<std::int64_t>& kernel) {
  for (std::size_t d = 0; d < begin.size(); ++d)
    if (begin[d] != end[d] || begin[d] < 0 || (!kernel.empty() && begin[d] * 2 > kernel[d]))
      return false;
  return true;
}

bool allOnes(const std::vector<std::int64_t>& values) {
  return std::all_of(values.begin(), values.end(), [](std::int64_t v) { return v == 1; });
}

// The weight reordered for ATen's blocked convolution, kept in the node's state while the same
// weight tensor comes back (the source stays referenced, so its identity cannot be reused).
at::Tensor reorderedWeight(KernelContext& c, const at::Tensor& w, const ConvolutionWindow& window) {
  CpuKernelState* state = kernelState(c);
  if (state && state->atenBlockedWeight.defined() && state->atenBlockedWeightSource.is_same(w))
    return state->atenBlockedWeight;
  at::Tensor reordered = at::mkldnn_reorder_conv2d_weight(w.contiguous().to_mkldnn(), window.padBegin, window.strides,
                                                          window.dilations, window.groups);
  if (state) {
    state->atenBlockedWeightSource = w;
    state->atenBlockedWeight = reordered;
  }
  return reordered;
}

// Whether the epilogue runs on the blocked output in ATen's blocked ops: at most a Relu, and a
// residual blocked or float32 to make so (of the output's shape: checked once that is known).
bool epilogueStaysBlocked(const ConvolutionEpilogue& epilogue, const at::Tensor& residual) {
  if (epilogue.activation != Activation::None && epilogue.activation != Activation::Relu)
    return false;
  return !epilogue.addResidual || blockable(residual);
}

class AtenBlockedFastPaths final : public FastPaths {
public:
  at::Tensor linear(KernelContext&, const at::Tensor&, const at::Tensor&, bool, const at::Tensor&,
                    ProductActivation) const override {
    return {};
  }
  at::Tensor batchedMatmul(const at::Tensor&, const at::Tensor&) const override { return {}; }
  bool holdsProductWeight(const KernelContext&) const override { return false; }
  at::Tensor linearOnHeldWeight(KernelContext&, const at::Tensor&, const at::Tensor&,
                                ProductActivation) const override {
    return {};
  }
  at::Tensor heldProductWeight(const KernelContext&) const override { return {}; }
  at::Tensor softmax(const at::Tensor&, std::int64_t, bool, bool) const override { return {}; }
  at::Tensor transposedConvolution(KernelContext&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const ConvolutionWindow&, bool) const override {
    return {};
  }
  at::Tensor plainWeight(const KernelContext&, const at::Tensor&) const override { return {}; }
  // No products of its own: ATen's fused attention.
  bool attentionAsSteps() const override { return false; }

  // Max pooling of a blocked 2-D input with implicit pads and no dilation (ATen's blocked max
  // pooling); a dense input pools on ATen's dense kernels, as it would without this wing.
  at::Tensor pool(const at::Tensor& x, const PoolWindow& window, bool mayReturnPrivate) const override {
    if (!x.is_mkldnn() || window.kind != PoolKind::Max || window.kernel.size() != 2 ||
        !implicitPads(window.padBegin, window.padEnd, window.kernel) || !allOnes(window.dilations))
      return {};
    const at::Tensor y = at::max_pool2d(x, window.kernel, window.strides, window.padBegin, window.dilations, window.ceil);
    return mayReturnPrivate ? y : y.to_dense();
  }

  at::Tensor convolution(KernelContext& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                         const ConvolutionWindow& window, const ConvolutionEpilogue& epilogue, const at::Tensor& residual,
                         bool, bool mayReturnPrivate) const override {
    const bool takes = w.dim() == 4 && x.dim() == 4 && x.numel() > 0 && blockable(x) && blockable(w) && !w.is_mkldnn() &&
                       !w.is_meta() && (!bias.defined() || (blockable(bias) && !bias.is_mkldnn())) &&
                       x.size(1) == w.size(1) * window.groups && implicitPads(window.padBegin, window.padEnd, {});
    const bool withEpilogue = epilogue.addResidual || epilogue.activation != Activation::None;
    // An epilogue ATen computes only densely: the caller convolves here without it, then adds it.
    if (!takes || (withEpilogue && (!mayReturnPrivate || !epilogueStaysBlocked(epilogue, residual))))
      return {};
    at::Tensor y = at::mkldnn_convolution(toBlocked(x), reorderedWeight(c, w, window),
                                          bias.defined() ? bias.contiguous() : bias, window.padBegin, window.strides,
                                          window.dilations, window.groups);
    if (epilogue.addResidual) {
      if (residual.sizes() != y.sizes()) // a residual that broadcasts: added densely by the caller
        return {};
      y = at::add(y, toBlocked(residual));
    }
    if (epilogue.activation == Activation::Relu)
      y = at::relu(y);
    return mayReturnPrivate ? y : y.to_dense();
  }
};

const AtenBlockedFastPaths theFastPaths;

} // namespace

const FastPaths* atenBlockedFastPaths() { return &theFastPaths; }

} // namespace cleave::runtime::cpu
