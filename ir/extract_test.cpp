#include "ir/extract.h"

#include <gtest/gtest.h>

#include "testing/test_graphs.h"

namespace cleave::ir {
namespace {
using cleave::testing::TestGraph;

// x -> a(MatMul x, w) -> b(Relu) -> d(Add b, c), x -> c(Relu): d is the output.
Graph diamond() {
  return TestGraph().input("x").param("w", {4, 4}).op("MatMul", "a", {"x", "w"}).op("Relu", "b", {"a"})
      .op("Relu", "c", {"x"}).op("Add", "d", {"b", "c"}).output({"d"}).build();
}

std::vector<std::string> namesOf(const Graph& graph, const std::vector<ValueId>& values) {
  std::vector<std::string> names;
  for (ValueId value : values)
    names.emplace_back(graph.valueName(value));
  return names;
}

TEST(BoundaryOf, InputsReadFromOutsideOutputsReadOutside) {
  Graph g = diamond();
  std::vector<NodeId> nodes{g.findNode("a"), g.findNode("b")};
  NodeSetBoundary boundary = boundaryOf(g, nodes);
  EXPECT_EQ(namesOf(g, boundary.inputs), std::vector<std::string>{"x"}); // w is a parameter: copied
  EXPECT_EQ(namesOf(g, boundary.outputs), std::vector<std::string>{"b"}); // a is read only inside
  std::vector<NodeId> last{g.findNode("d")};
  EXPECT_EQ(namesOf(g, boundaryOf(g, last).inputs), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(namesOf(g, boundaryOf(g, last).outputs), std::vector<std::string>{"d"}); // the graph output
}

TEST(ExtractSubgraph, CopiesOnlyTheParametersItReads) {
  Graph g = diamond();
  std::vector<NodeId> nodes{g.findNode("a"), g.findNode("b")};
  NodeSetBoundary boundary = boundaryOf(g, nodes);
  Expected<Graph> part = extractSubgraph(g, {"part", nodes, boundary.inputs, boundary.outputs});
  ASSERT_TRUE(part) << part.error().message();
  EXPECT_EQ(part->modelInfo().graphName, "part");
  EXPECT_EQ(part->numParameters(), 1u);
  EXPECT_NE(part->findNode("a"), NodeId{UINT32_MAX});
  EXPECT_EQ(part->findNode("c"), NodeId{UINT32_MAX});
  ASSERT_EQ(part->graphOutputs().size(), 1u);
  EXPECT_EQ(part->valueName(part->graphOutputs()[0]), "b");
  // Without the parameter copied (listed as an input), it arrives from outside instead.
  std::vector<ValueId> withW{g.findValue("x"), g.findValue("w")};
  Expected<Graph> sent = extractSubgraph(g, {"sent", nodes, withW, boundary.outputs});
  ASSERT_TRUE(sent) << sent.error().message();
  EXPECT_EQ(sent->numParameters(), 0u);
  EXPECT_EQ(sent->inputNodes().size(), 2u);
}

// A cut that reads only an alias holds the owner's tensor under both names (one storage), so
// cuts joined again share it as the source did; an owner sent from outside is not copied.
TEST(ExtractSubgraph, CopiesAnAliasWithTheParameterOwningItsTensor) {
  Graph g = TestGraph().input("x").param("w").alias("w_again", "w").op("MatMul", "a", {"x", "w"})
                .op("MatMul", "b", {"a", "w_again"}).output({"b"}).build();
  std::vector<NodeId> first{g.findNode("a")}, second{g.findNode("b")};
  NodeSetBoundary one = boundaryOf(g, first), two = boundaryOf(g, second);
  Expected<Graph> partOne = extractSubgraph(g, {"one", first, one.inputs, one.outputs});
  Expected<Graph> partTwo = extractSubgraph(g, {"two", second, two.inputs, two.outputs});
  ASSERT_TRUE(partOne && partTwo);
  ASSERT_EQ(partTwo->numParameters(), 2u); // w_again, and w that owns its tensor
  auto storageName = [](const Graph& graph, std::string_view value) {
    return graph.parameter(graph.storageOf(graph.parameters(graph.producer(graph.findValue(value)))[0])).name;
  };
  EXPECT_EQ(storageName(*partTwo, "w_again"), "w");
  const Graph* parts[] = {&*partOne, &*partTwo};
  const std::string outputs[] = {"b"};
  Expected<Graph> joined = joinGraphs({"joined", parts, outputs, "."});
  ASSERT_TRUE(joined) << joined.error().message();
  EXPECT_EQ(storageName(*joined, "w_again"), "w");
  EXPECT_EQ(storageName(*joined, "w"), "w");
  // With w sent from outside, the cut holds the alias alone (its own tensor, as before).
  std::vector<ValueId> sent{g.findValue("a"), g.findValue("w")};
  Expected<Graph> alone = extractSubgraph(g, {"alone", second, sent, two.outputs});
  ASSERT_TRUE(alone) << alone.error().message();
  ASSERT_EQ(alone->numParameters(), 1u);
  EXPECT_EQ(storageName(*alone, "w_again"), "w_again");
}

TEST(ExtractSubgraph, RefusesAValueFromNowhere) {
  Graph g = diamond();
  std::vector<NodeId> nodes{g.findNode("d")};
  std::vector<ValueId> onlyB{g.findValue("b")};
  std::vector<ValueId> outputs{g.findValue("d")};
  Expected<Graph> part = extractSubgraph(g, {"part", nodes, onlyB, outputs});
  ASSERT_FALSE(part);
  EXPECT_NE(part.error().message().find("c"), std::string::npos) << part.error().message();
}

// The diamond cut in two (a, b | c, d) and joined back: the same nodes, one input, one parameter.
TEST(JoinGraphs, GivesBackTheGraphACutCameFrom) {
  Graph g = diamond();
  std::vector<NodeId> first{g.findNode("a"), g.findNode("b")}, second{g.findNode("c"), g.findNode("d")};
  NodeSetBoundary one = boundaryOf(g, first), two = boundaryOf(g, second);
  Expected<Graph> partOne = extractSubgraph(g, {"one", first, one.inputs, one.outputs});
  Expected<Graph> partTwo = extractSubgraph(g, {"two", second, two.inputs, two.outputs});
  ASSERT_TRUE(partOne && partTwo);
  const Graph* parts[] = {&*partOne, &*partTwo};
  const std::string outputs[] = {"d"};
  Expected<Graph> joined = joinGraphs({"joined", parts, outputs, "."});
  ASSERT_TRUE(joined) << joined.error().message();
  EXPECT_EQ(joined->modelInfo().graphName, "joined");
  ASSERT_EQ(joined->inputNodes().size(), 1u); // x, read by both parts; b is bound to part one's
  EXPECT_EQ(joined->name(joined->inputNodes()[0]), "x");
  EXPECT_EQ(joined->numParameters(), 1u);
  EXPECT_EQ(*joined->readParameterData(ParamId{0}), *g.readParameterData(ParamId{0}));
  for (std::string_view name : {"a", "b", "c", "d"})
    EXPECT_NE(joined->findNode(name), NodeId{UINT32_MAX}) << name;
  EXPECT_EQ(joined->producer(joined->findValue("b")), joined->findNode("b"));
  // Parts out of order: part two's input b becomes a graph input, and then part one makes b too.
  const Graph* reversed[] = {&*partTwo, &*partOne};
  Expected<Graph> swapped = joinGraphs({"swapped", reversed, outputs, "."});
  ASSERT_FALSE(swapped);
  EXPECT_NE(swapped.error().message().find("'b'"), std::string::npos) << swapped.error().message();
  // An output no part makes is refused, naming it.
  const std::string missing[] = {"nowhere"};
  Expected<Graph> refused = joinGraphs({"refused", parts, missing, "."});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("nowhere"), std::string::npos) << refused.error().message();
}

} // namespace
} // namespace cleave::ir
