// runtime/kernels/loss.cpp - ONNX's loss ops (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss) on
// ATen's nll_loss: the losses a model is exported with for training (targets are ordinary inputs).
// ONNX and torch agree on the semantics: class axis 1, optional per-class weights, `mean`
// divides by the summed weights of the counted elements, targets equal to ignore_index count for
// nothing. Without an ignore_index attribute nothing is ignored. Also the optimizers of
// ai.onnx.preview.training (Adagrad, Momentum, Adam), one step per run, as their specs' pseudo code.
#include <cmath>
#include <limits>

#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

std::int64_t reductionMode(const KernelContext& c) {
  std::string reduction = c.stringAttr("reduction", "mean");
  return reduction == "none"   ? at::Reduction::None
         : reduction == "sum"  ? at::Reduction::Sum
         : reduction == "mean" ? at::Reduction::Mean
                               : throw KernelError("unknown reduction '" + reduction + "'");
}

// Without an ignore_index attribute nothing is ignored.
std::int64_t ignoredClass(const KernelContext& c) {
  return c.attribute("ignore_index") ? c.intAttr("ignore_index", 0) : std::numeric_limits<std::int64_t>::min();
}

// The optional per-class weights in the scores' dtype.
c10::optional<at::Tensor> classWeights(const at::Tensor& weight, const at::Tensor& scores) {
  return weight.defined() ? c10::optional<at::Tensor>(weight.to(scores.scalar_type())) : c10::nullopt;
}

at::Tensor negativeLogLikelihood(const KernelContext& c, const at::Tensor& logProb, const at::Tensor& target,
                                 const at::Tensor& weight) {
  return at::nll_loss_nd(logProb, target.to(at::kLong), classWeights(weight, logProb), reductionMode(c),
                         ignoredClass(c));
}

at::Tensor crossEntropy(const KernelContext& c, const at::Tensor& scores, const at::Tensor& target,
                        const at::Tensor& weight) {
  return at::cross_entropy_loss(scores, target.to(at::kLong), classWeights(weight, scores), reductionMode(c),
                                ignoredClass(c), 0.0);
}
// ai.onnx.preview.training's optimizers, one step each: inputs R (learning rate), T (update count),
// then the optimized tensors X..., their gradients G..., and each optimizer's state per tensor
// (Adagrad: H; Momentum: V; Adam: V, H); outputs the new X... then the new state, in that order.
// Each tensor is updated independently, as the specs' pseudo code says.
struct OptimizerStep {
  double rate;
  std::int64_t count;
  std::size_t tensors; // how many X
};

OptimizerStep optimizerStep(KernelContext& c, std::size_t statesPerTensor) {
  const std::size_t operands = c.numInputs() - 2;
  if (operands == 0 || operands % (2 + statesPerTensor) != 0)
    throw KernelError("the optimizer's " + std::to_string(operands) + " tensor operands are not X, G and " +
                      std::to_string(statesPerTensor) + " state(s) per tensor");
  return {c.input(0).item<double>(), c.input(1).item<std::int64_t>(), operands / (2 + statesPerTensor)};
}

Outputs adagrad(KernelContext& c) {
  const OptimizerStep step = optimizerStep(c, 1);
  const double norm = c.floatAttr("norm_coefficient", 0.0f), decay = c.floatAttr("decay_factor", 0.0f),
               epsilon = c.floatAttr("epsilon", 1e-6f);
  const double rate = step.rate / (1.0 + static_cast<double>(step.count) * decay);
  Outputs xs(step.tensors), hs(step.tensors);
  for (std::size_t i = 0; i < step.tensors; ++i) {
    const at::Tensor &x = c.input(2 + i), &g = c.input(2 + step.tensors + i), &h = c.input(2 + 2 * step.tensors + i);
    at::Tensor regularized = x * norm + g;
    hs[i] = h + regularized * regularized;
    xs[i] = x - rate * regularized / (hs[i].sqrt() + epsilon);
  }
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

Outputs momentum(KernelContext& c) {
  const OptimizerStep step = optimizerStep(c, 1);
  const double norm = c.floatAttr("norm_coefficient", 0.0f), alpha = c.floatAttr("alpha", 0.0f),
               beta = step.count > 0 ? c.floatAttr("beta", 1.0f) : 1.0;
  const bool nesterov = c.stringAttr("mode", "standard") == "nesterov";
  Outputs xs(step.tensors), vs(step.tensors);
  for (std::size_t i = 0; i < step.tensors; ++i) {
    const at::Tensor &x = c.input(2 + i), &g = c.input(2 + step.tensors + i), &v = c.input(2 + 2 * step.tensors + i);
    at::Tensor regularized = x * norm + g;
    vs[i] = v * alpha + regularized * beta;
    xs[i] = x - step.rate * (nesterov ? regularized + vs[i] * alpha : vs[i]);
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  return xs;
}

Outputs adam(KernelContext& c) {
  const OptimizerStep step = optimizerStep(c, 2);
  const double norm = c.floatAttr("norm_coefficient", 0.0f), post = c.floatAttr("norm_coefficient_post", 0.0f),
               alpha = c.floatAttr("alpha", 0.9f), beta = c.floatAttr("beta", 0.999f), epsilon = c.floatAttr("epsilon", 1e-6f);
  const double t = static_cast<double>(step.count);
  const double rate = step.count > 0 ? step.rate * std::sqrt(1.0 - std::pow(beta, t)) / (1.0 - std::pow(alpha, t)) : step.rate;
  Outputs xs(step.tensors), vs(step.tensors), hs(step.tensors);
  for (std::size_t i = 0; i < step.tensors; ++i) {
    const std::size_t n = step.tensors;
    const at::Tensor &x = c.input(2 + i), &g = c.input(2 + n + i), &v = c.input(2 + 2 * n + i), &h = c.input(2 + 3 * n + i);
    at::Tensor regularized = x * norm + g;
    vs[i] = v * alpha + regularized * (1.0 - alpha);
    hs[i] = h * beta + regularized * regularized * (1.0 - beta);
    xs[i] = (x - rate * vs[i] / (hs[i].sqrt() + epsilon)) * (1.0 - post);
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

} // namespace

void registerLossKernels(KernelTable& t) {
  t.add("ai.onnx.preview.training::Adagrad", adagrad, hostOperands({0, 1}));
  t.add("ai.onnx.preview.training::Momentum", momentum, hostOperands({0, 1}));
  t.add("ai.onnx.preview.training::Adam", adam, hostOperands({0, 1}));
  t.add("NegativeLogLikelihoodLoss", [](KernelContext& c) -> Outputs {
    return {negativeLogLikelihood(c, c.input(0), c.input(1), c.has(2) ? c.input(2) : at::Tensor())};
  });
  t.add("SoftmaxCrossEntropyLoss", [](KernelContext& c) -> Outputs {
    if (c.numOutputs() == 1) // as torch's cross_entropy: one op, which autocast keeps in float32
      return {crossEntropy(c, c.input(0), c.input(1), c.has(2) ? c.input(2) : at::Tensor())};
    at::Tensor logProb = at::log_softmax(c.input(0), 1);
    Outputs out{negativeLogLikelihood(c, logProb, c.input(1), c.has(2) ? c.input(2) : at::Tensor())};
    if (c.numOutputs() > 1)
      out.push_back(logProb);
    return out;
  });
}

} // namespace cleave::runtime
