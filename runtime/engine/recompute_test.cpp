// Unit tests of selective recomputation: where the plan cuts, and gradients equal to the held forward's.
#include "runtime/engine/recompute.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>

#include "runtime/engine/executor_test_support.h"
#include "runtime/training/split_backward.h"

namespace cleave::runtime {
namespace {
using test_support::spec;

// Attention in miniature: q = x Wq (a weight product), scores q q^T scaled, a softmax, and the
// attention's output p q (products of two activations), then a second weight product.
std::shared_ptr<const ir::Graph> attention() {
  test_support::NodeChain chain({"x"});
  at::manual_seed(11);
  test_support::addFloatParameter(chain.builder, "wq", at::randn({4, 4}));
  test_support::addFloatParameter(chain.builder, "wo", at::randn({4, 3}));
  test_support::addFloatParameter(chain.builder, "scale", at::full({}, 0.5));
  chain.add(spec("MatMul", {"x", "wq"}, {}, "q_proj"), "q");
  chain.add(spec("Transpose", {"q"}, {}, "q_t"), "qt");
  chain.add(spec("MatMul", {"q", "qt"}, {}, "scores"), "s");
  chain.add(spec("Mul", {"s", "scale"}, {}, "scaled"), "s2");
  chain.add(spec("Softmax", {"s2"}, {test_support::integer("axis", -1)}, "softmax"), "p");
  chain.add(spec("MatMul", {"p", "q"}, {}, "attend"), "a");
  chain.add(spec("MatMul", {"a", "wo"}, {}, "out_proj"), "y");
  chain.add(spec("Tanh", {"y"}, {}, "act"), "z");
  Expected<ir::Graph> graph = std::move(chain).finish({"z"});
  EXPECT_TRUE(graph) << (graph ? "" : graph.error().message());
  return std::make_shared<const ir::Graph>(std::move(*graph));
}

std::vector<std::string> names(const ir::Graph& g, const std::vector<ir::ValueId>& values) {
  std::vector<std::string> out;
  for (ir::ValueId v : values)
    out.emplace_back(g.valueName(v));
  return out;
}

TEST(SelectiveRecompute, SegmentsAreTheRunsBetweenWeightProductsHoldingAnActivationProduct) {
  auto g = attention();
  RecomputePlan plan = planSelectiveRecompute(*g);
  ASSERT_EQ(plan.segments.size(), 1u);
  const RecomputeSegment& segment = plan.segments[0];
  EXPECT_EQ(g->name(segment.first), "q_t");
  EXPECT_EQ(g->name(segment.last), "attend");
  EXPECT_EQ(names(*g, segment.inputs), (std::vector<std::string>{"q", "scale"}));
  EXPECT_EQ(names(*g, segment.outputs), (std::vector<std::string>{"a"}));
  EXPECT_EQ(plan.startsAt[segment.first], 0);

  // A perceptron has no product of two activations: nothing to recompute.
  test_support::NodeChain mlp({"x"});
  test_support::addFloatParameter(mlp.builder, "w1", at::randn({4, 8}));
  test_support::addFloatParameter(mlp.builder, "w2", at::randn({8, 2}));
  mlp.add(spec("MatMul", {"x", "w1"}, {}, "fc1"), "h");
  mlp.add(spec("Relu", {"h"}, {}, "relu"), "r");
  mlp.add(spec("Transpose", {"w2"}, {test_support::ints("perm", {1, 0})}, "w2_t"), "w2t");
  mlp.add(spec("Transpose", {"w2t"}, {test_support::ints("perm", {1, 0})}, "w2_tt"), "w2tt");
  mlp.add(spec("MatMul", {"r", "w2tt"}, {}, "fc2"), "y"); // a weight computed from a parameter
  Expected<ir::Graph> perceptron = std::move(mlp).finish({"y"});
  ASSERT_TRUE(perceptron) << perceptron.error().message();
  EXPECT_TRUE(planSelectiveRecompute(*perceptron).segments.empty());
}

struct Gradients {
  at::Tensor output, x, wq, wo, scale;
};

// One forward and backward of the attention graph, selective recomputation on or off, the
// backward whole or split in I (the input's gradient) and W (the weights').
Gradients train(bool selective, bool split) {
  auto g = attention();
  ExecutorOptions options;
  options.trainable = true;
  Expected<std::unique_ptr<Executor>> executor = Executor::create(g, options);
  EXPECT_TRUE(executor) << (executor ? "" : executor.error().message());
  (*executor)->setSelectiveRecompute(selective);
  at::manual_seed(3);
  at::Tensor x = at::randn({6, 4}).requires_grad_(true);
  Expected<TensorMap> outputs = (*executor)->run({{"x", x}});
  EXPECT_TRUE(outputs) << (outputs ? "" : outputs.error().message());
  at::Tensor z = outputs->at("z");
  at::Tensor grad = at::linspace(-1.0, 1.0, z.numel()).reshape(z.sizes());
  Gradients out;
  if (split) {
    PendingWeightBackward pending;
    Expected<std::vector<at::Tensor>> inputGrads = backwardInputs({z}, {grad}, {x}, pending);
    EXPECT_TRUE(inputGrads) << (inputGrads ? "" : inputGrads.error().message());
    out.x = (*inputGrads)[0];
    for (auto& [name, tensor] : (*executor)->trainableParameters())
      EXPECT_FALSE(tensor.grad().defined()) << name << " has a gradient before W";
    EXPECT_TRUE(backwardWeights(pending));
  } else {
    torch::autograd::backward({z}, {grad});
    out.x = x.grad();
  }
  out.output = z.detach();
  for (auto& [name, tensor] : (*executor)->trainableParameters())
    (name == "wq" ? out.wq : name == "wo" ? out.wo : out.scale) = tensor.grad();
  return out;
}

TEST(SelectiveRecompute, GradientsEqualTheHeldForwardsBitForBit) {
  for (bool split : {false, true}) {
    Gradients held = train(false, split), recomputed = train(true, split);
    for (auto [a, b] : {std::pair{held.output, recomputed.output}, {held.x, recomputed.x}, {held.wq, recomputed.wq},
                        {held.wo, recomputed.wo}, {held.scale, recomputed.scale}}) {
      ASSERT_TRUE(a.defined() && b.defined()) << "split " << split;
      EXPECT_TRUE(at::equal(a, b)) << "split " << split << ": differs by " << (a - b).abs().max().item<double>();
    }
  }
}

// The replaying node holds the segment's inputs only: the scores and softmax are not in the
// graph until the backward recomputes them.
TEST(SelectiveRecompute, TheGraphHoldsTheSegmentsInputsOnly) {
  auto g = attention();
  ExecutorOptions options;
  options.trainable = true;
  Expected<std::unique_ptr<Executor>> executor = Executor::create(g, options);
  ASSERT_TRUE(executor) << executor.error().message();
  (*executor)->setSelectiveRecompute(true);
  at::Tensor x = at::randn({6, 4}).requires_grad_(true);
  Expected<TensorMap> outputs = (*executor)->run({{"x", x}});
  ASSERT_TRUE(outputs) << outputs.error().message();
  // z = tanh(a wo): tanh's node, then the product's, then the replaying node for a.
  auto tanhNode = outputs->at("z").grad_fn();
  ASSERT_TRUE(tanhNode);
  std::shared_ptr<torch::autograd::Node> product = tanhNode->next_edges()[0].function;
  ASSERT_TRUE(product);
  bool found = false;
  for (const torch::autograd::Edge& edge : product->next_edges())
    found = found || (edge.function && edge.function->name() == "cleave::SegmentReplay");
  EXPECT_TRUE(found);
}

} // namespace
} // namespace cleave::runtime
