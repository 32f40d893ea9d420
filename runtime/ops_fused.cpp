// runtime/ops_fused.cpp - the kernels of fused node groups (runtime/fusion.h).
#include "runtime/fusion.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

// MatMul(x, W) + b.
Outputs matmulBias(KernelContext& c) { return {matmul(c, c.input(0), c.input(1), c.input(2))}; }

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
