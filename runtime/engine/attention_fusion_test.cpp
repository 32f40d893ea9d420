// Attention as the exporters spell it (runtime/engine/fusion.h, Kind::Attention): which node
// chains form one group, and that the group computes what the nodes compute, through ATen's fused
// attention or the wing's steps (FastPaths::attentionAsSteps), with fusion on and off.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "runtime/engine/executor.h"
#include "runtime/engine/executor_test_support.h"
#include "runtime/engine/fusion.h"

namespace cleave::runtime {
namespace {
using namespace test_support;

// A scalar float parameter (the exporters' scale and fill constants).
void addScalar(NodeChain& chain, const std::string& name, double value) {
  addFloatParameter(chain.builder, name, at::full({}, value, at::kFloat));
}

struct Spelling {
  std::string name;
  ir::Graph graph;
  std::size_t groupNodes = 0; // nodes in its one Attention group; 0: no group
};

// q [B, H, L, E], kt [B, H, E, S], v [B, H, S, E]; `mask` [1, 1, L, S] additive, `keep` bool.
TensorMap attentionInputs() {
  at::manual_seed(71);
  return {{"q", at::randn({2, 3, 5, 8})},
          {"kt", at::randn({2, 3, 8, 6})},
          {"v", at::randn({2, 3, 6, 8})},
          {"mask", at::randn({1, 1, 5, 6})},
          {"keep", at::rand({1, 1, 5, 6}) > 0.3}};
}

// Softmax(q kt / sqrt 8 + mask) v with the keep mask filled with -inf where false.
at::Tensor expectedAttention(const TensorMap& in, bool additive, bool keepMask) {
  at::Tensor scores = at::matmul(in.at("q"), in.at("kt")) / std::sqrt(8.0);
  if (additive)
    scores = scores + in.at("mask");
  if (keepMask)
    scores = scores.masked_fill(in.at("keep").logical_not(), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), in.at("v"));
}

Expected<ir::Graph> chainOf(std::vector<ir::NodeSpec> nodes, const std::vector<std::pair<std::string, double>>& scalars,
                            std::vector<std::string> outputs = {"y"}) {
  NodeChain chain({"q", "kt", "v", "mask", "keep"});
  for (const auto& [name, value] : scalars)
    addScalar(chain, name, value);
  for (ir::NodeSpec& node : nodes) {
    const std::string out = node.name;
    chain.add(std::move(node), out);
  }
  return std::move(chain).finish(std::move(outputs));
}

std::vector<ir::NodeSpec> nodesBetween(std::vector<ir::NodeSpec> middle) {
  std::vector<ir::NodeSpec> nodes{spec("MatMul", {"q", "kt"}, {}, "s")};
  nodes.insert(nodes.end(), middle.begin(), middle.end());
  const std::string last = nodes.back().name;
  nodes.push_back(spec("Softmax", {last}, {integer("axis", -1)}, "p"));
  nodes.push_back(spec("MatMul", {"p", "v"}, {}, "y"));
  return nodes;
}

// BERT and LLaMA (Div, Add), GPT-2 (Mul, Where filling -inf where the causal mask is 0), the
// exporters' scaled_dot_product_attention with pre-scaled Q and K (Add, then an inference
// Dropout), and both mask kinds at once.
TEST(AttentionFusion, TheExportersSpellingsFormOneGroupEqualToTheirNodes) {
  const TensorMap in = attentionInputs();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    std::string name;
    std::vector<ir::NodeSpec> middle;
    bool additive, keep;
    std::vector<ir::NodeSpec> after; // between Softmax and the last MatMul
  };
  std::vector<Case> cases{
      {"div-add", {spec("Div", {"s", "root"}, {}, "d"), spec("Add", {"d", "mask"}, {}, "a")}, true, false, {}},
      {"mul-where", {spec("Mul", {"s", "scale"}, {}, "m"), spec("Not", {"keep"}, {}, "drop"),
                     spec("Where", {"drop", "fill", "m"}, {}, "w")}, false, true, {}},
      {"mul-where-kept", {spec("Mul", {"scale", "s"}, {}, "m"), spec("Where", {"keep", "m", "fill"}, {}, "w")},
       false, true, {}},
      {"add-where", {spec("Div", {"s", "root"}, {}, "d"), spec("Add", {"mask", "d"}, {}, "a"),
                     spec("Where", {"keep", "a", "fill"}, {}, "w")}, true, true, {}},
  };
  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<ir::NodeSpec> nodes = nodesBetween(c.middle);
    // The Not of the mask is no step: it runs before the group, which reads its output.
    Expected<ir::Graph> graph =
        chainOf(nodes, {{"root", std::sqrt(8.0)}, {"scale", 1.0 / std::sqrt(8.0)}, {"fill", -inf}});
    ASSERT_TRUE(graph) << graph.error().message();
    const FusionPlan plan = planFusions(*graph);
    ASSERT_EQ(plan.groups.size(), 1u);
    EXPECT_EQ(plan.groups[0].kind, FusedGroup::Kind::Attention);
    const std::size_t steps = c.middle.size() - (c.name == "mul-where" ? 1 : 0);
    EXPECT_EQ(plan.groups[0].nodes.size(), steps + 3);
    EXPECT_NEAR(plan.groups[0].attention.scale, 1.0 / std::sqrt(8.0), 1e-7); // float32 constants
    Expected<std::unique_ptr<Executor>> executor = Executor::create(std::make_shared<const ir::Graph>(std::move(*graph)));
    ASSERT_TRUE(executor) << executor.error().message();
    RunStats stats;
    stats.profileOps = true;
    Expected<TensorMap> out = (*executor)->run(in, &stats);
    ASSERT_TRUE(out) << out.error().message();
    EXPECT_TRUE(at::allclose(out->at("y"), expectedAttention(in, c.additive, c.keep), 1e-5, 1e-5));
    EXPECT_EQ(stats.secondsByOp.count("Attention(MatMul,Softmax,MatMul)"), 1u);
    EXPECT_EQ(stats.secondsByOp.count("Softmax"), 0u);
  }
}

// An inference Dropout between the Softmax and the last product joins the group; the plan without
// attention (Optimizations::fusedAttention off) has no attention group, and both compute the same.
TEST(AttentionFusion, AnInferenceDropoutJoinsAndTurningItOffKeepsTheNodes) {
  std::vector<ir::NodeSpec> nodes{spec("MatMul", {"q", "kt"}, {}, "s"), spec("Add", {"s", "mask"}, {}, "a"),
                                  spec("Softmax", {"a"}, {}, "p"), spec("Dropout", {"p"}, {}, "dp"),
                                  spec("MatMul", {"dp", "v"}, {}, "y")};
  Expected<ir::Graph> graph = chainOf(nodes, {});
  ASSERT_TRUE(graph) << graph.error().message();
  const FusionPlan plan = planFusions(*graph);
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].nodes.size(), 5u);
  for (const FusedGroup& group : planFusions(*graph, false).groups) // Q Kt + mask: a MatMul+Add
    EXPECT_NE(group.kind, FusedGroup::Kind::Attention);
  auto shared = std::make_shared<const ir::Graph>(std::move(*graph));
  ExecutorOptions apart;
  apart.optimizations.fusedAttention = false;
  Expected<std::unique_ptr<Executor>> fused = Executor::create(shared), nodeByNode = Executor::create(shared, apart);
  ASSERT_TRUE(fused && nodeByNode);
  const TensorMap in = attentionInputs();
  Expected<TensorMap> a = (*fused)->run(in), b = (*nodeByNode)->run(in);
  ASSERT_TRUE(a && b);
  const at::Tensor expected = at::matmul(at::softmax(at::matmul(in.at("q"), in.at("kt")) + in.at("mask"), -1), in.at("v"));
  EXPECT_TRUE(at::allclose(a->at("y"), expected, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(b->at("y"), expected, 1e-5, 1e-5));
}

// The exporters' boolean masks end in Where(IsNaN(p), 0, p): both nodes join the group, and a
// row no key is left to comes out zeros, through the fused call or the steps alike.
TEST(AttentionFusion, TheNanStepJoinsAndARowWithNoKeyIsZeros) {
  std::vector<ir::NodeSpec> nodes{spec("MatMul", {"q", "kt"}, {}, "s"), spec("Add", {"s", "mask"}, {}, "a"),
                                  spec("Softmax", {"a"}, {}, "p"), spec("IsNaN", {"p"}, {}, "nan"),
                                  spec("Where", {"nan", "zero", "p"}, {}, "pz"), spec("MatMul", {"pz", "v"}, {}, "y")};
  Expected<ir::Graph> graph = chainOf(nodes, {{"zero", 0.0}});
  ASSERT_TRUE(graph) << graph.error().message();
  const FusionPlan plan = planFusions(*graph);
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].nodes.size(), 6u);
  EXPECT_TRUE(plan.groups[0].attention.zeroNanRows);
  TensorMap in = attentionInputs();
  in["mask"] = at::zeros({1, 1, 5, 6});
  in["mask"].select(2, 3).fill_(-std::numeric_limits<float>::infinity()); // query 3 sees no key
  Expected<std::unique_ptr<Executor>> executor = Executor::create(std::make_shared<const ir::Graph>(std::move(*graph)));
  ASSERT_TRUE(executor) << executor.error().message();
  Expected<TensorMap> out = (*executor)->run(in);
  ASSERT_TRUE(out) << out.error().message();
  at::Tensor p = at::softmax(at::matmul(in.at("q"), in.at("kt")) + in.at("mask"), -1);
  const at::Tensor expected = at::matmul(p.masked_fill(p.isnan(), 0.0), in.at("v"));
  EXPECT_TRUE(at::allclose(out->at("y"), expected, 1e-5, 1e-5));
  EXPECT_TRUE(at::equal(out->at("y").select(2, 3), at::zeros({2, 3, 8})));
}

// Chains that are not attention as fused: a scale after the mask (it would scale the mask), a
// fill that adding does not absorb, a score read twice, a stored weight as K, a Softmax whose
// output is a graph output.
TEST(AttentionFusion, ChainsThatDifferStayNodes) {
  std::vector<std::pair<std::string, std::vector<ir::NodeSpec>>> cases{
      {"scale after mask", nodesBetween({spec("Add", {"s", "mask"}, {}, "a"), spec("Mul", {"a", "scale"}, {}, "m")})},
      {"small fill", nodesBetween({spec("Where", {"keep", "s", "small"}, {}, "w")})},
      {"score read twice", nodesBetween({spec("Add", {"s", "s"}, {}, "a")})},
  };
  for (auto& [name, nodes] : cases) {
    SCOPED_TRACE(name);
    Expected<ir::Graph> graph = chainOf(nodes, {{"scale", 0.5}, {"small", -100.0}});
    ASSERT_TRUE(graph) << graph.error().message();
    for (const FusedGroup& group : planFusions(*graph).groups)
      EXPECT_NE(group.kind, FusedGroup::Kind::Attention);
  }
  Expected<ir::Graph> probabilitiesOut = chainOf(nodesBetween({}), {}, {"y", "p"});
  ASSERT_TRUE(probabilitiesOut) << probabilitiesOut.error().message();
  EXPECT_TRUE(planFusions(*probabilitiesOut).groups.empty());
  NodeChain weighted({"q", "v"});
  addFloatParameter(weighted.builder, "w", at::randn({8, 6}));
  weighted.add(spec("MatMul", {"q", "w"}, {}, "s"), "s");
  weighted.add(spec("Softmax", {"s"}, {}, "p"), "p");
  weighted.add(spec("MatMul", {"p", "v"}, {}, "y"), "y");
  Expected<ir::Graph> layer = std::move(weighted).finish({"y"});
  ASSERT_TRUE(layer) << layer.error().message();
  for (const FusedGroup& group : planFusions(*layer).groups)
    EXPECT_NE(group.kind, FusedGroup::Kind::Attention);
}

// Operands the fused call does not take (3-D, a softmax over another axis) run the group's steps,
// equal to the nodes.
TEST(AttentionFusion, OperandsTheFusedCallRefusesRunTheSteps) {
  at::manual_seed(73);
  const TensorMap in{{"q", at::randn({3, 5, 8})}, {"kt", at::randn({3, 8, 6})}, {"v", at::randn({3, 6, 4})},
                     {"mask", at::randn({5, 6})}, {"keep", at::ones({1}, at::kBool)}};
  for (std::int64_t axis : {-1, 1}) {
    SCOPED_TRACE(axis);
    std::vector<ir::NodeSpec> nodes{spec("MatMul", {"q", "kt"}, {}, "s"), spec("Add", {"s", "mask"}, {}, "a"),
                                    spec("Softmax", {"a"}, {integer("axis", axis)}, "p"),
                                    spec("MatMul", {"p", "v"}, {}, "y")};
    Expected<ir::Graph> graph = chainOf(nodes, {});
    ASSERT_TRUE(graph) << graph.error().message();
    ASSERT_EQ(planFusions(*graph).groups.size(), 1u);
    Expected<std::unique_ptr<Executor>> executor = Executor::create(std::make_shared<const ir::Graph>(std::move(*graph)));
    ASSERT_TRUE(executor) << executor.error().message();
    Expected<TensorMap> out = (*executor)->run(in);
    ASSERT_TRUE(out) << out.error().message();
    const at::Tensor expected =
        at::matmul(at::softmax(at::matmul(in.at("q"), in.at("kt")) + in.at("mask"), axis), in.at("v"));
    EXPECT_TRUE(at::allclose(out->at("y"), expected, 1e-5, 1e-5));
  }
}

} // namespace
} // namespace cleave::runtime
