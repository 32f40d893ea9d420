#include "gen/families.h"

#include <gtest/gtest.h>

#include "ir/analysis.h"
#include "ir/printer.h"

namespace cleave::gen {
namespace {

std::uint32_t callable(const ir::Graph& g) { return ir::computeGraphStats(g).callableNodes; }

// Node counts of shared/bench/reference/graphs.py (FX's callable nodes) for the same N.
TEST(Families, MatchTheReferenceStructure) {
  Expected<ir::Graph> chain = generateFamily("chain", 10);
  ASSERT_TRUE(chain);
  EXPECT_EQ(callable(*chain), 40u);                // 4 call_function nodes a block
  EXPECT_EQ(chain->numParameters(), 10u);          // one get_attr weight a block
  EXPECT_EQ(ir::computeGraphStats(*chain).opHistogram[0].count, 10u);
  EXPECT_EQ(chain->numNodes(), 10u * 5 + 2);       // FX: 5 nodes a block + placeholder + output

  Expected<ir::Graph> wide = generateFamily("wide", 6);
  ASSERT_TRUE(wide);
  EXPECT_EQ(callable(*wide), 6u * 4 + 1);
  EXPECT_EQ(ir::computeGraphStats(*wide).depth, 5u);

  Expected<ir::Graph> linear = generateFamily("linear_chain", 8);
  ASSERT_TRUE(linear);
  EXPECT_EQ(callable(*linear), 16u);               // Linear + (add | relu) a layer
  EXPECT_EQ(ir::computeGraphStats(*linear).parameterBytes, 8 * (32 * 32 + 32) * 4 + 4);

  Expected<ir::Graph> diamonds = generateFamily("diamonds", 5);
  ASSERT_TRUE(diamonds);
  EXPECT_EQ(callable(*diamonds), 20u);
}

TEST(Families, SigmoidEveryFifthChainBlock) {
  Expected<ir::Graph> chain = generateFamily("chain", 10);
  ASSERT_TRUE(chain);
  EXPECT_EQ(chain->opType(chain->findNode("sigmoid")), "Sigmoid");
  EXPECT_EQ(chain->opType(chain->findNode("sigmoid_1")), "Sigmoid");
  EXPECT_EQ(chain->findNode("sigmoid_2"), ir::NodeId{UINT32_MAX});
}

TEST(Families, TransformerLayersHaveAttentionAndMlp) {
  Expected<ir::Graph> graph = generateFamily("transformer", 2, {.width = 32, .heads = 2, .sequence = 8});
  ASSERT_TRUE(graph) << graph.error().message();
  ir::GraphStats stats = ir::computeGraphStats(*graph);
  std::uint32_t softmax = 0, layerNorm = 0;
  for (const ir::OpCount& op : stats.opHistogram) {
    if (op.target == "Softmax") softmax = op.count;
    if (op.target == "LayerNormalization") layerNorm = op.count;
  }
  EXPECT_EQ(softmax, 2u);
  EXPECT_EQ(layerNorm, 4u);
  ir::ValueId out = graph->graphOutputs()[0];
  EXPECT_EQ(graph->bytes(out), 1 * 8 * 32 * 4);
}

TEST(Families, SameSeedSameGraphOtherSeedOtherWeights) {
  Expected<ir::Graph> a = generateFamily("chain", 3, {.seed = 1});
  Expected<ir::Graph> b = generateFamily("chain", 3, {.seed = 1});
  Expected<ir::Graph> c = generateFamily("chain", 3, {.seed = 2});
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(ir::printGraph(*a), ir::printGraph(*b));
  auto weights = [](const ir::Graph& g) { return *g.readParameterData(ir::ParamId{0}); };
  EXPECT_EQ(weights(*a), weights(*b));
  EXPECT_NE(weights(*a), weights(*c));
}

TEST(Families, RejectsUnknownFamiliesAndBadSizes) {
  Expected<ir::Graph> unknown = generateFamily("pyramid", 3);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message().find("unknown family 'pyramid'"), std::string::npos);
  EXPECT_FALSE(generateFamily("chain", 0));
  EXPECT_FALSE(generateFamily("transformer", 2, {.width = 30, .heads = 4}));
}

} // namespace
} // namespace cleave::gen
