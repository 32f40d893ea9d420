// runtime/kernels/products.cpp - matrix products for the kernel families: on the CPU wing's oneDNN
// (runtime/cpu/onednn.h) where it takes the operands, its reordered or packed weight kept in the
// node's CPU state; else on ATen.
#include "runtime/cpu/cpu_wing.h"
#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

at::Tensor linear(KernelContext& c, const at::Tensor& x, const at::Tensor& weight, bool weightIsNK,
                  const at::Tensor& bias, bool thenGelu) {
  std::shared_ptr<onednn::PackedProduct> uncached;
  cpu::CpuKernelState* state = cpu::kernelState(c);
  at::Tensor out = onednn::linear(x, weight, weightIsNK, bias, thenGelu, state ? state->product : uncached);
  if (out.defined())
    return out;
  // at::linear, as torch.nn.Linear calls it: the same kernel (addmm) and, under autocast
  // (mixed-precision training), the same casts: bias included in the low-precision product.
  const bool biasInProduct = bias.defined() && bias.dim() == 1 && bias.scalar_type() == x.scalar_type();
  at::Tensor product = weightIsNK && (!bias.defined() || biasInProduct)
                           ? at::linear(x, weight, biasInProduct ? c10::optional<at::Tensor>(bias) : c10::nullopt)
                           : at::matmul(x, weightIsNK ? weight.t() : weight);
  if (bias.defined() && !(weightIsNK && biasInProduct))
    product = product + bias;
  return thenGelu ? at::gelu(product) : product;
}

at::Tensor batchedMatmul(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor out = onednn::batchedMatmul(a, b);
  return out.defined() ? out : at::matmul(a, b);
}

at::Tensor productWeight(const KernelContext& c, std::size_t i) {
  const cpu::CpuKernelState* state = cpu::kernelState(c);
  if (c.has(i) || !state || !state->packedWeight)
    return c.input(i);
  return at::Tensor();
}

at::Tensor matmul(KernelContext& c, const at::Tensor& a, const at::Tensor& packedOrB, const at::Tensor& bias,
                  bool thenGelu) {
  at::Tensor b = packedOrB;
  if (!b.defined()) { // the weight lives packed in the node's cache
    cpu::CpuKernelState& state = *cpu::kernelState(c); // productWeight() saw it hold the weight
    const std::shared_ptr<const onednn::PackedWeight>& packed = state.packedWeight;
    const std::int64_t n = onednn::packedWeightDims(*packed)[1];
    const bool takesBias =
        !bias.defined() || (bias.dim() == 1 && bias.size(0) == n && bias.scalar_type() == a.scalar_type());
    if (a.dim() >= 2 && takesBias) {
      at::Tensor out = onednn::linearPacked(a, packed, bias, thenGelu, state.product);
      if (out.defined())
        return out;
    }
    b = onednn::unpackWeight(*packed);
  }
  const bool byWeight = b.dim() == 2 && a.dim() >= 2; // activations times a 2-D weight
  const bool inProduct =
      !bias.defined() || (bias.dim() == 1 && bias.size(0) == b.size(1) && bias.scalar_type() == a.scalar_type());
  if (byWeight && inProduct)
    return linear(c, a, b, false, bias, thenGelu);
  at::Tensor product = byWeight ? linear(c, a, b, false, at::Tensor()) : batchedMatmul(a, b);
  if (bias.defined())
    product = at::add(product, bias);
  return thenGelu ? at::gelu(product) : product;
}

} // namespace cleave::runtime
