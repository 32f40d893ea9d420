// runtime/ops_fused.cpp - the kernels of fused node groups (runtime/fusion.h).
#include "runtime/fusion.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

// MatMul(x, W) + b: one product with a 1-D bias [N] against a 2-D weight; otherwise the product,
// then the (broadcast) sum, as the two nodes would.
Outputs matmulBias(KernelContext& c) {
  const at::Tensor &x = c.input(0), &w = c.input(1), &b = c.input(2);
  bool oneProduct = w.dim() == 2 && x.dim() >= 2 && b.dim() == 1 && b.size(0) == w.size(1) &&
                    b.scalar_type() == x.scalar_type();
  if (oneProduct)
    return {linear(c, x, w, false, b)};
  at::Tensor product = w.dim() == 2 && x.dim() >= 2 ? linear(c, x, w, false, at::Tensor()) : batchedMatmul(x, w);
  return {at::add(product, b)};
}

// x * 0.5 * (1 + erf(x / sqrt 2)).
Outputs gelu(KernelContext& c) { return {at::gelu(c.input(0))}; }
} // namespace

Kernel fusedKernel(FusedGroup::Kind kind) {
  switch (kind) {
  case FusedGroup::Kind::MatMulBias: return matmulBias;
  case FusedGroup::Kind::Gelu: return gelu;
  }
  return nullptr;
}

const char* fusedName(FusedGroup::Kind kind) {
  switch (kind) {
  case FusedGroup::Kind::MatMulBias: return "MatMul+Add";
  case FusedGroup::Kind::Gelu: return "Gelu(Div,Erf,Add,Mul,Mul)";
  }
  return "?";
}

} // namespace cleave::runtime
