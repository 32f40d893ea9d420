#include "ir/analysis.h"

#include <gtest/gtest.h>

#include "testing/test_graphs.h"

namespace cleave::ir {
namespace {
using cleave::testing::TestGraph;

// x -> a -> b -> d, x -> c -> d : depth 3, widest level 2 (a and c at level 1).
Graph diamond() {
  return TestGraph().input("x").param("w").op("MatMul", "a", {"x", "w"}).op("Relu", "b", {"a"})
      .op("Relu", "c", {"x"}).op("Add", "d", {"b", "c"}).output({"d"}).build();
}

TEST(ComputeLevels, SourcesAtZeroOpsAboveTheirDeepestOperand) {
  Graph g = diamond();
  IdVector<NodeId, std::uint32_t> levels = computeLevels(g);
  EXPECT_EQ(levels[g.findNode("x")], 0u);
  EXPECT_EQ(levels[g.findNode("w")], 0u);
  EXPECT_EQ(levels[g.findNode("a")], 1u);
  EXPECT_EQ(levels[g.findNode("c")], 1u);
  EXPECT_EQ(levels[g.findNode("b")], 2u);
  EXPECT_EQ(levels[g.findNode("d")], 3u);
}

TEST(GraphStats, CountsEdgesBytesDepthAndWidth) {
  Graph g = diamond();
  GraphStats stats = computeGraphStats(g);
  EXPECT_EQ(stats.nodes, 7u);
  EXPECT_EQ(stats.callableNodes, 4u);
  EXPECT_EQ(stats.inputs, 1u);
  EXPECT_EQ(stats.parameterNodes, 1u);
  // x->a, x->c, w->a, a->b, b->d, c->d, d->output
  EXPECT_EQ(stats.edges, 7u);
  EXPECT_EQ(stats.parameterBytes, 64);
  EXPECT_EQ(stats.activationBytes, 4 * 64);
  EXPECT_EQ(stats.depth, 3u);
  EXPECT_EQ(stats.widestLevel, 1u);
  EXPECT_EQ(stats.widestLevelNodes, 2u);
  ASSERT_EQ(stats.opHistogram.size(), 3u);
  EXPECT_EQ(stats.opHistogram[0].target, "Relu");
  EXPECT_EQ(stats.opHistogram[0].count, 2u);
  EXPECT_EQ(stats.opHistogram[1].target, "Add"); // ties keep name order
}

} // namespace
} // namespace cleave::ir
