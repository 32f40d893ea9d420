#include "split/splitter.h"

#include <gtest/gtest.h>

#include <random>

#include "ir/printer.h"
#include "testing/test_graphs.h"

namespace cleave::split {
namespace {
using cleave::testing::TestGraph;
using ir::NodeId;

IdVector<NodeId, support::Decision> decide(const ir::Graph& graph, const std::string& profileJson) {
  Expected<support::Profile> profile = support::Profile::fromJson(profileJson, "test");
  EXPECT_TRUE(profile);
  return support::decideAll(graph, *profile);
}

std::vector<std::pair<bool, std::vector<std::string>>> shape(const ir::Graph& graph, const SplitResult& result) {
  std::vector<std::pair<bool, std::vector<std::string>>> out;
  for (const plan::Submodule& sub : result.plan.submodules) {
    std::vector<std::string> names;
    for (NodeId node : sub.nodes)
      names.emplace_back(graph.name(node));
    out.emplace_back((sub.role == plan::SubmoduleRole::Accelerator), names);
  }
  return out;
}

// x -> a(Relu) -> b(Sigmoid) -> c(Relu) -> d(Relu)
ir::Graph chain() {
  return TestGraph().input("x").op("Relu", "a", {"x"}).op("Sigmoid", "b", {"a"}).op("Relu", "c", {"b"})
      .op("Relu", "d", {"c"}).output({"d"}).build();
}

TEST(Splitter, AlternatesAroundAnUnsupportedNode) {
  ir::Graph g = chain();
  Expected<SplitResult> result = splitGraph(g, decide(g, R"({"ops": ["Relu"]})"), {});
  ASSERT_TRUE(result);
  using V = std::vector<std::string>;
  EXPECT_EQ(shape(g, *result), (std::vector<std::pair<bool, V>>{{true, V{"a"}}, {false, V{"b"}}, {true, V{"c", "d"}}}));
  EXPECT_EQ(result->plan.submodules[0].name, "_run_on_acc_0");
  EXPECT_EQ(result->plan.submodules[1].name, "_run_on_cpu_1");
  EXPECT_EQ(splitReasonOf(result->plan, g.findNode("b")), rejectedByProfile(support::Reason::UnsupportedOp));
  EXPECT_NE(plan::reasonOf(result->plan, g.findNode("b"))->detail.find("Sigmoid"), std::string::npos);
}

TEST(Splitter, StartsOnTheCpuWhenACpuNodeIsReady) {
  ir::Graph g = chain();
  Expected<SplitResult> result = splitGraph(g, decide(g, R"({"ops": ["Sigmoid"]})"), {});
  ASSERT_TRUE(result);
  ASSERT_EQ(result->plan.submodules.size(), 3u);
  EXPECT_FALSE((result->plan.submodules[0].role == plan::SubmoduleRole::Accelerator));
}

TEST(Splitter, SmallAccSubgraphsJoinTheCpuWithAReason) {
  ir::Graph g = chain();
  Expected<SplitResult> result = splitGraph(g, decide(g, R"({"ops": ["Relu"]})"), {.minAccSize = 2});
  ASSERT_TRUE(result);
  using V = std::vector<std::string>;
  EXPECT_EQ(shape(g, *result), (std::vector<std::pair<bool, V>>{{false, V{"a", "b"}}, {true, V{"c", "d"}}}));
  EXPECT_EQ(splitReasonOf(result->plan, g.findNode("a")), SplitReason::BelowMinSize);
  EXPECT_EQ(result->beforeMinSize.acc, 2u);
  EXPECT_EQ(result->afterMinSize.acc, 1u);
}

TEST(Splitter, MaxSplitsMergesTheLeastValuableAccSubgraph) {
  ir::Graph g = chain();
  Expected<SplitResult> result = splitGraph(g, decide(g, R"({"ops": ["Relu"]})"), {.maxSplits = 2});
  ASSERT_TRUE(result);
  ASSERT_LE(result->plan.submodules.size(), 2u);
  // {a} moves 1 node for 2 x 64 boundary bytes; {c, d} moves 2 nodes for the same: {a} goes.
  EXPECT_EQ(splitReasonOf(result->plan, g.findNode("a")), SplitReason::MaxSplitsMerge);
  EXPECT_EQ(splitReasonOf(result->plan, g.findNode("c")), SplitReason::Accelerator);
  ASSERT_FALSE(result->plan.remarks.empty());
}

TEST(Splitter, NonTensorValuesNeverCrossBetweenAccAndCpu) {
  // shape (acc, produces a torch.Size) -> view (cpu) : shape must go to the CPU;
  // size2 (cpu, produces a Size) -> use (acc): use must go to the CPU.
  ir::ValueType sizeType;
  sizeType.kind = ir::ValueKind::Shape;
  ir::NodeSpec shapeNode{.kind = ir::NodeKind::Op, .name = "shape", .opType = "Shape", .inputs = {"x"},
                         .outputs = {{"shape", sizeType}}};
  ir::NodeSpec size2{.kind = ir::NodeKind::Op, .name = "size2", .opType = "Size", .inputs = {"x"},
                     .outputs = {{"size2", sizeType}}};
  ir::Graph g = TestGraph().input("x").node(shapeNode).op("View", "view", {"x", "shape"}).node(size2)
                    .op("Relu", "use", {"view", "size2"}).output({"use"}).build();
  Expected<SplitResult> result = splitGraph(g, decide(g, R"({"ops": ["Shape", "Relu"]})"), {});
  ASSERT_TRUE(result);
  EXPECT_EQ(splitReasonOf(result->plan, g.findNode("shape")), SplitReason::NonTensorBoundary);
  EXPECT_EQ(splitReasonOf(result->plan, g.findNode("use")), SplitReason::NonTensorBoundary);
  // Fusion groups apply even when non-tensor flow is allowed (as in torch); skip them too.
  Expected<SplitResult> allowed =
      splitGraph(g, decide(g, R"({"ops": ["Shape", "Relu"]})"), {.skipFusion = true, .allowNonTensor = true});
  ASSERT_TRUE(allowed);
  EXPECT_EQ(splitReasonOf(allowed->plan, g.findNode("shape")), SplitReason::Accelerator);
}

TEST(Splitter, OverlappingFusionGroupsMergeInsteadOfFailing) {
  // Two non-tensor producers share a consumer; both feed through non-tensor chains.
  ir::ValueType sizeType;
  sizeType.kind = ir::ValueKind::Scalar;
  auto scalarOp = [&](std::string name, std::vector<std::string> inputs) {
    return ir::NodeSpec{.kind = ir::NodeKind::Op, .name = name, .opType = "Dim", .inputs = std::move(inputs),
                        .outputs = {{name, sizeType}}};
  };
  ir::Graph g = TestGraph().input("x").node(scalarOp("s1", {"x"})).node(scalarOp("s2", {"x"}))
                    .node(scalarOp("both", {"s1", "s2"})).op("Relu", "r", {"x", "both"})
                    .op("Relu", "t", {"r", "s2"}).output({"t"}).build();
  Expected<SplitResult> result = splitGraph(g, decide(g, R"({"ops": ["Dim", "Relu"]})"), {});
  ASSERT_TRUE(result);
  EXPECT_EQ(result->fusionGroups, 1u);
  EXPECT_EQ(result->plan.submodules.size(), 1u);
}

TEST(Splitter, MovesNonTensorNodesToTheSubmoduleOfTheirUsers) {
  // a (acc) -> s (acc, non-tensor) -> v (cpu): with non-tensor flow allowed the sweep puts s in
  // the acc submodule; the boundary move takes it to v's.
  ir::ValueType sizeType;
  sizeType.kind = ir::ValueKind::Shape;
  ir::NodeSpec shapeNode{.kind = ir::NodeKind::Op, .name = "s", .opType = "Shape", .inputs = {"a"},
                         .outputs = {{"s", sizeType}}};
  ir::Graph g = TestGraph().input("x").op("Relu", "a", {"x"}).node(shapeNode).op("View", "v", {"a", "s"})
                    .output({"v"}).build();
  auto decisions = decide(g, R"({"ops": ["Relu", "Shape"]})");
  SplitOptions options{.skipFusion = true, .allowNonTensor = true};
  Expected<SplitResult> plain = splitGraph(g, decisions, options);
  ASSERT_TRUE(plain);
  using V = std::vector<std::string>;
  EXPECT_EQ(shape(g, *plain), (std::vector<std::pair<bool, V>>{{true, V{"a", "s"}}, {false, V{"v"}}}));
  options.moveNonTensorBoundary = true;
  Expected<SplitResult> moved = splitGraph(g, decisions, options);
  ASSERT_TRUE(moved);
  EXPECT_EQ(shape(g, *moved), (std::vector<std::pair<bool, V>>{{true, V{"a"}}, {false, V{"s", "v"}}}));
  EXPECT_EQ(splitReasonOf(moved->plan, g.findNode("s")), SplitReason::NonTensorBoundary);
}

TEST(Splitter, ExtendAccPullsSmallSubgraphsForward) {
  // a (acc) -> b (cpu) ... with min size 2, {a} is demoted; c, d follow b. Extending {c, d}
  // cannot take a (its user b is in an earlier submodule and is not acc), so nothing moves.
  ir::Graph g = chain();
  auto decisions = decide(g, R"({"ops": ["Relu"]})");
  Expected<SplitResult> result = splitGraph(g, decisions, {.minAccSize = 2, .extendAcc = true});
  ASSERT_TRUE(result);
  EXPECT_EQ(splitReasonOf(result->plan, g.findNode("a")), SplitReason::BelowMinSize);
  // x -> a (acc) -> d ; x -> b (cpu) -> c (acc) -> d: {a} alone is demoted, then pulled into {c, d}.
  ir::Graph diamond = TestGraph().input("x").op("Relu", "a", {"x"}).op("Sigmoid", "b", {"x"})
                          .op("Relu", "c", {"b"}).op("Add", "d", {"a", "c"}).output({"d"}).build();
  auto diamondDecisions = decide(diamond, R"({"ops": ["Relu", "Add"]})");
  Expected<SplitResult> extended = splitGraph(diamond, diamondDecisions, {.minAccSize = 2, .extendAcc = true});
  ASSERT_TRUE(extended);
  EXPECT_EQ(splitReasonOf(extended->plan, diamond.findNode("a")), SplitReason::Accelerator);
  EXPECT_EQ(extended->plan.submodules[extended->plan.submoduleOf[diamond.findNode("a")]].role, plan::SubmoduleRole::Accelerator);
}

TEST(Splitter, RejectsNegativeOptions) {
  ir::Graph g = chain();
  EXPECT_FALSE(splitGraph(g, decide(g, R"({"ops": ["Relu"]})"), {.minAccSize = -1}));
  EXPECT_FALSE(splitGraph(g, decide(g, R"({"ops": ["Relu"]})"), {.maxSplits = -2}));
}

// ----- properties over random DAGs -----

struct RandomCase {
  ir::Graph graph;
  std::string profile;
  SplitOptions options;
};

RandomCase randomCase(std::uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  static const char* kOps[] = {"A", "B", "C", "D", "E"};
  TestGraph t;
  t.input("x").param("w");
  std::vector<std::string> values = {"x", "w"};
  int count = 3 + pick(60);
  for (int i = 0; i < count; ++i) {
    ir::NodeSpec spec;
    spec.name = "n" + std::to_string(i);
    spec.opType = kOps[pick(5)];
    int inputs = 1 + pick(3);
    for (int k = 0; k < inputs; ++k) {
      // Mostly recent values (long chains), sometimes far back (skips).
      int back = pick(4) == 0 ? pick(static_cast<int>(values.size())) : pick(std::min<int>(3, values.size()));
      spec.inputs.push_back(values[values.size() - 1 - back]);
    }
    ir::ValueType type = ir::ValueType::tensor(ir::DType::F32, {4, 4});
    if (pick(6) == 0) {
      type = ir::ValueType{};
      type.kind = pick(2) ? ir::ValueKind::Scalar : ir::ValueKind::Shape;
    }
    spec.outputs.push_back({spec.name, type});
    t.node(spec);
    values.push_back(spec.name);
  }
  t.output({values.back()});
  std::string profile = R"({"ops": [)";
  bool first = true;
  for (const char* op : kOps)
    if (pick(3) != 0) {
      profile += std::string(first ? "" : ",") + "\"" + op + "\"";
      first = false;
    }
  profile += "]}";
  if (first)
    profile = R"({"ops": ["Z"]})";
  SplitOptions options{.minAccSize = 1 + pick(4), .maxSplits = pick(3) == 0 ? 1 + pick(5) : 0,
                       .skipFusion = pick(4) == 0, .allowNonTensor = pick(4) == 0,
                       .extendAcc = pick(3) == 0, .moveNonTensorBoundary = pick(3) == 0};
  return {t.build(), profile, options};
}

TEST(SplitterProperties, HoldOnThousandsOfRandomGraphs) {
  int multiSubmodule = 0;
  for (std::uint32_t seed = 0; seed < 2000; ++seed) {
    RandomCase c = randomCase(seed);
    const ir::Graph& g = c.graph;
    IdVector<NodeId, support::Decision> decisions = decide(g, c.profile);
    Expected<SplitResult> result = splitGraph(g, decisions, c.options);
    ASSERT_TRUE(result) << "seed " << seed << ": " << result.error().message() << "\n"
                        << c.profile << " min " << c.options.minAccSize << " max " << c.options.maxSplits
                        << " skipFusion " << c.options.skipFusion << " allowNonTensor " << c.options.allowNonTensor
                        << "\n" << ir::printGraph(g);
    const plan::CutPlan& plan = result->plan;
    SCOPED_TRACE("seed " + std::to_string(seed) + " minAccSize " + std::to_string(c.options.minAccSize) +
                 " skipFusion " + std::to_string(c.options.skipFusion));
    multiSubmodule += plan.submodules.size() > 1;
    // Every callable node in exactly one submodule; others in none.
    std::vector<int> seen(g.numNodes(), 0);
    for (const plan::Submodule& sub : plan.submodules)
      for (NodeId node : sub.nodes)
        ++seen[index(node)];
    for (std::uint32_t n = 0; n < g.numNodes(); ++n)
      ASSERT_EQ(seen[n], g.isCallable(NodeId{n}) ? 1 : 0) << g.name(NodeId{n});
    for (std::uint32_t s = 0; s < plan.submodules.size(); ++s) {
      const plan::Submodule& sub = plan.submodules[s];
      ASSERT_FALSE(sub.nodes.empty());
      if (s > 0 && !c.options.extendAcc && !c.options.moveNonTensorBoundary)
        ASSERT_NE((sub.role == plan::SubmoduleRole::Accelerator), (plan.submodules[s - 1].role == plan::SubmoduleRole::Accelerator)) << "kinds alternate";
      for (NodeId node : sub.nodes) {
        // Acc submodules hold only supported nodes, and every node's placement matches.
        if ((sub.role == plan::SubmoduleRole::Accelerator)) {
          ASSERT_TRUE(decisions[node].supported);
          ASSERT_EQ(splitReasonOf(plan, node), SplitReason::Accelerator);
        } else {
          ASSERT_NE(splitReasonOf(plan, node), SplitReason::Accelerator);
        }
      }
      if ((sub.role == plan::SubmoduleRole::Accelerator) && !c.options.extendAcc && !c.options.moveNonTensorBoundary)
        ASSERT_GE(static_cast<std::int64_t>(sub.nodes.size()), c.options.minAccSize);
    }
    if (c.options.maxSplits > 0 && !c.options.moveNonTensorBoundary)
      ASSERT_LE(static_cast<std::int64_t>(plan.submodules.size()), c.options.maxSplits);
    // Submodule order is topological; non-tensor values never cross acc <-> cpu.
    for (std::uint32_t n = 0; n < g.numNodes(); ++n) {
      NodeId node{n};
      for (ir::ValueId value : g.inputs(node)) {
        NodeId producer = g.producer(value);
        if (!g.isCallable(producer))
          continue;
        std::uint32_t from = plan.submoduleOf[producer];
        std::uint32_t to = g.isCallable(node) ? plan.submoduleOf[node] : UINT32_MAX;
        if (to != UINT32_MAX)
          ASSERT_LE(from, to) << g.name(producer) << " -> " << g.name(node);
        bool fromAcc = (plan.submodules[from].role == plan::SubmoduleRole::Accelerator);
        bool toAcc = to != UINT32_MAX && (plan.submodules[to].role == plan::SubmoduleRole::Accelerator);
        if (!c.options.allowNonTensor && !producesTensor(g, producer) && from != to)
          ASSERT_EQ(fromAcc, toAcc) << "non-tensor " << g.valueName(value) << " crosses acc/cpu";
      }
    }
    // Deterministic.
    Expected<SplitResult> again = splitGraph(g, decisions, c.options);
    ASSERT_TRUE(again);
    ASSERT_EQ(again->plan, result->plan);
  }
  EXPECT_GT(multiSubmodule, 500);
}

} // namespace
} // namespace cleave::split
