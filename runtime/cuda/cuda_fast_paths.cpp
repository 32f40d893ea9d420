// runtime/cuda/cuda_fast_paths.cpp - the CUDA wing's fast paths (runtime/engine/fast_paths.h): a
// product with its bias and then ReLU or GELU's tanh form in one call, ATen's _addmm_activation,
// whose activation cuBLASLt applies inside the product (its epilogue) instead of a second kernel
// reading and writing the product again. Everything else, exact (erf) GELU included, which
// cuBLASLt's epilogue does not compute, is ATen's own CUDA kernels (cuBLAS, cuDNN): each hook
// returns undefined and the shared kernel calls ATen. Under autocast (mixed precision) the
// product takes autocast's half type, as at::linear would under autocast.
// Complexity: one call per product; O(1) besides.
#include <ATen/ATen.h>

#include "runtime/cuda/cuda_wing.h"
#include "runtime/engine/fast_paths.h"
#include "runtime/engine/torch_compat.h"

namespace cleave::runtime::cuda {
namespace {

bool cublasLtEpilogue(ProductActivation activation) {
  return activation == ProductActivation::Relu || activation == ProductActivation::GeluTanh;
}

class CudaFastPaths final : public FastPaths {
public:
  // x[..., K] by the weight, plus bias [N], then Relu or tanh-GELU, as one _addmm_activation over
  // x's rows; undefined for anything else (no activation, exact GELU, no 1-D bias, mixed types).
  at::Tensor linear(KernelContext&, const at::Tensor& x, const at::Tensor& weight, bool weightIsNK,
                    const at::Tensor& bias, ProductActivation activation) const override {
    if (!cublasLtEpilogue(activation) || !bias.defined() || bias.dim() != 1 || x.dim() < 2 || weight.dim() != 2 ||
        !at::isFloatingType(x.scalar_type()))
      return {};
    const std::optional<at::ScalarType> half = activeAutocast(at::kCUDA);
    const at::ScalarType type = half ? *half : x.scalar_type();
    if (!half && (weight.scalar_type() != type || bias.scalar_type() != type))
      return {};
    const at::Tensor kn = weightIsNK ? weight.t() : weight;
    const at::Tensor rows = x.reshape({-1, x.size(-1)});
    // Autocast's casts made here: _addmm_activation is on none of its lists.
    at::Tensor out = at::_addmm_activation(bias.to(type), rows.to(type), kn.to(type), 1, 1,
                                           activation == ProductActivation::GeluTanh);
    std::vector<std::int64_t> shape = x.sizes().vec();
    shape.back() = kn.size(1);
    return out.view(shape);
  }
  at::Tensor batchedMatmul(const at::Tensor&, const at::Tensor&) const override { return {}; }
  bool holdsProductWeight(const KernelContext&) const override { return false; }
  at::Tensor linearOnHeldWeight(KernelContext&, const at::Tensor&, const at::Tensor&,
                                ProductActivation) const override {
    return {};
  }
  at::Tensor heldProductWeight(const KernelContext&) const override { return {}; }
  at::Tensor softmax(const at::Tensor&, std::int64_t, bool, bool) const override { return {}; }
  at::Tensor pool(const at::Tensor&, const PoolWindow&, bool) const override { return {}; }
  at::Tensor convolution(KernelContext&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                         const ConvolutionWindow&, const ConvolutionEpilogue&, const at::Tensor&, bool,
                         bool) const override {
    return {};
  }
  at::Tensor transposedConvolution(KernelContext&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const ConvolutionWindow&, bool) const override {
    return {};
  }
  // ATen's fused attention (flash or memory-efficient kernels) beats its steps on a GPU.
  bool attentionAsSteps() const override { return false; }
  at::Tensor plainWeight(const KernelContext&, const at::Tensor&) const override { return {}; }
};

} // namespace

const FastPaths* cudaFastPaths() {
  static const CudaFastPaths paths;
  return &paths;
}

} // namespace cleave::runtime::cuda
