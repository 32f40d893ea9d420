// Unit tests of the split backward (zero bubble's I and W) against one whole backward.
#include "runtime/training/split_backward.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

namespace cleave::runtime {
namespace {

struct Tensors {
  at::Tensor x, w1, b1, w2;
};

Tensors makeTensors() {
  at::manual_seed(7);
  Tensors t;
  t.x = at::randn({5, 3}).requires_grad_(true);
  t.w1 = at::randn({4, 3}).requires_grad_(true);
  t.b1 = at::randn({4}).requires_grad_(true);
  t.w2 = at::randn({4, 3}).requires_grad_(true);
  return t;
}

// A stage: a linear layer and tanh, a weight used twice (through the input and through the
// hidden value), and a second output that depends on a weight only.
std::vector<at::Tensor> stageOutputs(const Tensors& t) {
  at::Tensor hidden = at::tanh(at::linear(t.x, t.w1, t.b1));
  at::Tensor y = at::matmul(hidden, t.w2) + at::matmul(t.x, t.w2.t()).sum(1, true);
  at::Tensor penalty = (t.w1 * t.w1).sum();
  return {y, penalty};
}

TEST(SplitBackward, InputsFirstThenWeightsEqualsOneBackward) {
  Tensors whole = makeTensors(), split = makeTensors();
  at::Tensor gradY = at::randn({5, 3}), gradPenalty = at::full({}, 0.5);

  std::vector<at::Tensor> wholeOut = stageOutputs(whole);
  torch::autograd::backward(wholeOut, {gradY, gradPenalty});

  std::vector<at::Tensor> splitOut = stageOutputs(split);
  PendingWeightBackward pending;
  Expected<std::vector<at::Tensor>> leafGrads = backwardInputs(splitOut, {gradY, gradPenalty}, {split.x}, pending);
  ASSERT_TRUE(leafGrads) << leafGrads.error().message();
  ASSERT_EQ(leafGrads->size(), 1u);
  EXPECT_TRUE(at::allclose((*leafGrads)[0], whole.x.grad(), 1e-6, 1e-6));
  // I computed no parameter's gradient, and did not touch the leaf's .grad either.
  EXPECT_FALSE(split.w1.grad().defined());
  EXPECT_FALSE(split.b1.grad().defined());
  EXPECT_FALSE(split.w2.grad().defined());
  EXPECT_FALSE(split.x.grad().defined());
  EXPECT_FALSE(pending.empty());

  // A second I before this W is refused (the pending weight work would be lost).
  PendingWeightBackward& busy = pending;
  EXPECT_FALSE(backwardInputs(splitOut, {gradY, gradPenalty}, {split.x}, busy));

  splitOut.clear(); // W needs nothing but what I kept
  ASSERT_TRUE(backwardWeights(pending));
  EXPECT_TRUE(pending.empty());
  for (auto [a, b] : {std::pair{split.w1, whole.w1}, {split.b1, whole.b1}, {split.w2, whole.w2}}) {
    ASSERT_TRUE(a.grad().defined());
    EXPECT_TRUE(at::allclose(a.grad(), b.grad(), 1e-5, 1e-6));
  }
  EXPECT_FALSE(split.x.grad().defined()); // W does not reach the inputs
}

TEST(SplitBackward, AStageWithoutInputLeavesDoesEverythingInW) {
  Tensors whole = makeTensors(), split = makeTensors();
  whole.x = whole.x.detach();
  split.x = split.x.detach();
  at::Tensor gradY = at::randn({5, 3}), gradPenalty = at::full({}, 1.0);
  torch::autograd::backward(stageOutputs(whole), {gradY, gradPenalty});
  PendingWeightBackward pending;
  Expected<std::vector<at::Tensor>> leafGrads = backwardInputs(stageOutputs(split), {gradY, gradPenalty}, {split.x}, pending);
  ASSERT_TRUE(leafGrads);
  EXPECT_FALSE((*leafGrads)[0].defined());
  EXPECT_FALSE(split.w1.grad().defined());
  ASSERT_TRUE(backwardWeights(pending));
  EXPECT_TRUE(at::equal(split.w1.grad(), whole.w1.grad()));
  EXPECT_TRUE(at::equal(split.w2.grad(), whole.w2.grad()));
}

} // namespace
} // namespace cleave::runtime
