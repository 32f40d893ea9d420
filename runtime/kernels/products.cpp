// runtime/kernels/products.cpp - matrix products for the kernel families: on the fast paths of the
// wing serving the operands' device (runtime/engine/fast_paths.h) where it takes them, what it
// derives from the weight kept in the node's state; else on ATen.
#include "runtime/engine/fast_paths.h"
#include "runtime/kernels/helpers.h"
#include "runtime/engine/torch_compat.h"

namespace cleave::runtime {

at::Tensor linear(KernelContext& c, const at::Tensor& x, const at::Tensor& weight, bool weightIsNK,
                  const at::Tensor& bias, ProductActivation activation) {
  if (const FastPaths* fast = fastPathsFor(x.device()))
    if (at::Tensor out = fast->linear(c, x, weight, weightIsNK, bias, activation); out.defined())
      return out;
  // at::linear, as torch.nn.Linear calls it: the same kernel (addmm) and, under autocast (mixed
  // precision), the same casts: bias included in the low-precision product, the output in the
  // half type (a [K, N] weight goes in as its transposed view).
  const bool autocast = activeAutocast(x.device().type()).has_value(); // which casts every operand itself
  const bool biasInProduct = bias.defined() && bias.dim() == 1 &&
                             (autocast ? at::isFloatingType(bias.scalar_type()) : bias.scalar_type() == x.scalar_type());
  const bool asLinear = (weightIsNK || autocast) && (!bias.defined() || biasInProduct);
  const at::Tensor rows = weightIsNK ? weight : weight.t();
  at::Tensor product = asLinear ? at::linear(x, rows, biasInProduct ? c10::optional<at::Tensor>(bias) : c10::nullopt)
                                : at::matmul(x, rows.t());
  if (bias.defined() && !asLinear)
    product = product + bias;
  return activation == ProductActivation::None ? product : activateInPlace(product, activation);
}

at::Tensor batchedMatmul(const at::Tensor& a, const at::Tensor& b) {
  if (const FastPaths* fast = fastPathsFor(a.device()))
    if (at::Tensor out = fast->batchedMatmul(a, b); out.defined())
      return out;
  return at::matmul(a, b);
}

at::Tensor productWeight(const KernelContext& c, std::size_t i) {
  if (c.has(i))
    return c.input(i);
  const FastPaths* fast = fastPathsFor(c.device());
  if (!fast || !fast->holdsProductWeight(c))
    return c.input(i); // throws: the operand is absent
  return at::Tensor();
}

at::Tensor matmul(KernelContext& c, const at::Tensor& a, const at::Tensor& packedOrB, const at::Tensor& bias,
                  ProductActivation activation) {
  at::Tensor b = packedOrB;
  if (!b.defined()) { // the wing alone holds the weight (productWeight() saw it)
    const FastPaths& fast = *fastPathsFor(c.device());
    if (at::Tensor out = fast.linearOnHeldWeight(c, a, bias, activation); out.defined())
      return out;
    // A term the product does not take (a residual of the output's shape): the product on the held
    // weight, then the sum, never the weight unpacked every run (a decoder's every MatMul+Add).
    if (bias.defined())
      if (at::Tensor product = fast.linearOnHeldWeight(c, a, at::Tensor(), ProductActivation::None); product.defined()) {
        at::Tensor sum = at::add(product, bias);
        return activation == ProductActivation::None ? sum : activateInPlace(sum, activation);
      }
    b = fast.heldProductWeight(c);
  }
  const bool byWeight = b.dim() == 2 && a.dim() >= 2; // activations times a 2-D weight
  const bool inProduct =
      !bias.defined() || (bias.dim() == 1 && bias.size(0) == b.size(1) && bias.scalar_type() == a.scalar_type());
  if (byWeight && inProduct)
    return linear(c, a, b, false, bias, activation);
  at::Tensor product = byWeight ? linear(c, a, b, false, at::Tensor()) : batchedMatmul(a, b);
  if (bias.defined())
    product = at::add(product, bias);
  return activation == ProductActivation::None ? product : activateInPlace(product, activation);
}

} // namespace cleave::runtime
