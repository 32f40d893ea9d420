// runtime/ops_fused.cpp - the kernels of fused node groups (runtime/fusion.h).
#include "runtime/fusion.h"
#include "runtime/onednn.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

// MatMul(x, W) + b.
Outputs matmulBias(KernelContext& c) { return {matmul(c, c.input(0), productWeight(c, 1), c.input(2))}; }

// GELU(MatMul(x, W) + b).
Outputs matmulBiasGelu(KernelContext& c) { return {matmul(c, c.input(0), productWeight(c, 1), c.input(2), true)}; }

// x * 0.5 * (1 + erf(x / sqrt 2)).
Outputs gelu(KernelContext& c) { return {at::gelu(c.input(0))}; }

// (x - mean) / sqrt(variance + eps) * gamma + beta over the last axis (the biased variance, as
// the decomposed graph computes it). Gamma and beta as at::layer_norm's affine when they are
// [N] of x's dtype; else applied after it with the graph's broadcasting.
Outputs layerNorm(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  const at::Tensor &gamma = c.input(2), &beta = c.input(3);
  const double eps = c.input(1).item<double>();
  const std::int64_t n = x.dim() > 0 ? x.size(-1) : 1;
  auto isAffine = [&](const at::Tensor& t) { return t.dim() == 1 && t.size(0) == n && t.scalar_type() == x.scalar_type(); };
  if (x.dim() > 0 && isAffine(gamma) && isAffine(beta))
    return {at::layer_norm(x, {n}, gamma, beta, eps)};
  return {at::add(at::mul(at::layer_norm(x, {n}, {}, {}, eps), gamma), beta)};
}

// Conv then its post-ops (the context is the Conv node's: its attributes).
template <onednn::ConvPostOps::Activation activation, bool residual> Outputs convWith(KernelContext& c) {
  onednn::ConvPostOps post{residual, activation};
  if constexpr (activation == onednn::ConvPostOps::Activation::Clip) {
    post.clipLow = c.input(3).item<float>();
    post.clipHigh = c.input(4).item<float>();
  }
  if constexpr (activation == onednn::ConvPostOps::Activation::HardSigmoid) {
    // Its attributes are on the group's last node, the Conv output's one reader.
    const ir::Graph& g = c.graph();
    const ir::NodeId hard = g.users(g.outputs(c.node())[0])[0];
    const ir::Attribute* alpha = g.findAttribute(hard, "alpha");
    const ir::Attribute* beta = g.findAttribute(hard, "beta");
    post.alpha = alpha ? static_cast<float>(alpha->floatValue) : 0.2f;
    post.beta = beta ? static_cast<float>(beta->floatValue) : 0.5f;
  }
  return {fusedConvolution(c, c.input(0), c.input(1), c.has(2) ? c.input(2) : at::Tensor(), post,
                           residual ? c.input(3) : at::Tensor(), residual && c.mayOverwrite(3))};
}
} // namespace

Kernel fusedKernel(FusedGroup::Kind kind) {
  switch (kind) {
  case FusedGroup::Kind::MatMulBias: return matmulBias;
  case FusedGroup::Kind::MatMulBiasGelu: return matmulBiasGelu;
  case FusedGroup::Kind::Gelu: return gelu;
  case FusedGroup::Kind::ConvRelu: return convWith<onednn::ConvPostOps::Activation::Relu, false>;
  case FusedGroup::Kind::ConvClip: return convWith<onednn::ConvPostOps::Activation::Clip, false>;
  case FusedGroup::Kind::ConvHardSwish: return convWith<onednn::ConvPostOps::Activation::HardSwish, false>;
  case FusedGroup::Kind::ConvHardSigmoid: return convWith<onednn::ConvPostOps::Activation::HardSigmoid, false>;
  case FusedGroup::Kind::ConvSilu: return convWith<onednn::ConvPostOps::Activation::Swish, false>;
  case FusedGroup::Kind::ConvAdd: return convWith<onednn::ConvPostOps::Activation::None, true>;
  case FusedGroup::Kind::ConvAddRelu: return convWith<onednn::ConvPostOps::Activation::Relu, true>;
  case FusedGroup::Kind::LayerNorm: return layerNorm;
  }
  return nullptr;
}

const char* fusedName(FusedGroup::Kind kind) {
  switch (kind) {
  case FusedGroup::Kind::MatMulBias: return "MatMul+Add";
  case FusedGroup::Kind::MatMulBiasGelu: return "MatMul+Add+Gelu";
  case FusedGroup::Kind::Gelu: return "Gelu(Div,Erf,Add,Mul,Mul)";
  case FusedGroup::Kind::ConvRelu: return "Conv+Relu";
  case FusedGroup::Kind::ConvClip: return "Conv+Clip";
  case FusedGroup::Kind::ConvHardSwish: return "Conv+HardSwish";
  case FusedGroup::Kind::ConvHardSigmoid: return "Conv+HardSigmoid";
  case FusedGroup::Kind::ConvSilu: return "Conv+Sigmoid+Mul";
  case FusedGroup::Kind::ConvAdd: return "Conv+Add";
  case FusedGroup::Kind::ConvAddRelu: return "Conv+Add+Relu";
  case FusedGroup::Kind::LayerNorm: return "LayerNorm(ReduceMean,Sub,Pow,ReduceMean,Add,Sqrt,Div,Mul,Add)";
  }
  return "?";
}

} // namespace cleave::runtime
