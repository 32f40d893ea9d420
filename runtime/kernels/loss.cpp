// runtime/kernels/loss.cpp - ONNX's loss ops (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss) on
// ATen's nll_loss: the losses a model is exported with for training (targets are ordinary inputs).
// ONNX and torch agree on the semantics: class axis 1, optional per-class weights, `mean`
// divides by the summed weights of the counted elements, targets equal to ignore_index count for
// nothing. Without an ignore_index attribute nothing is ignored.
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
} // namespace

void registerLossKernels(KernelTable& t) {
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
