#include "ir/builder.h"

#include <gtest/gtest.h>

#include "ir/printer.h"
#include "testing/test_graphs.h"

namespace cleave::ir {
namespace {
using cleave::testing::TestGraph;

std::vector<std::string> nodeNames(const Graph& graph) {
  std::vector<std::string> names;
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n)
    names.emplace_back(graph.name(NodeId{n}));
  return names;
}

TEST(GraphBuilder, BuildsAChainWithUsersAndKinds) {
  Graph g = TestGraph().input("x").param("w").op("MatMul", "mm", {"x", "w"}).op("Relu", "r", {"mm"})
                .output({"r"}).build();
  ASSERT_EQ(g.numNodes(), 5u);
  EXPECT_EQ(g.kind(g.findNode("x")), NodeKind::Input);
  EXPECT_EQ(g.kind(g.findNode("w")), NodeKind::Parameter);
  EXPECT_EQ(g.kind(g.findNode("mm")), NodeKind::Op);
  EXPECT_EQ(g.kind(g.outputNode()), NodeKind::Output);
  ValueId mm = g.findValue("mm");
  ASSERT_EQ(g.users(mm).size(), 1u);
  EXPECT_EQ(g.name(g.users(mm)[0]), "r");
  EXPECT_EQ(g.bytes(mm), 64);
  EXPECT_EQ(g.parameterBytes(g.findNode("w")), 64);
  ASSERT_EQ(g.graphOutputs().size(), 1u);
  EXPECT_EQ(g.valueName(g.graphOutputs()[0]), "r");
  EXPECT_TRUE(verifyGraph(g));
}

TEST(GraphBuilder, KeepsAValidCreationOrder) {
  Graph g = TestGraph().input("x").op("Relu", "a", {"x"}).op("Relu", "b", {"x"}).op("Add", "c", {"a", "b"})
                .output({"c"}).build();
  EXPECT_EQ(nodeNames(g), (std::vector<std::string>{"x", "a", "b", "c", "output"}));
}

TEST(GraphBuilder, SortsNodesAddedBeforeTheirOperands) {
  Graph g = TestGraph().op("Relu", "late", {"early"}).input("x").op("Relu", "early", {"x"})
                .output({"late"}).build();
  EXPECT_EQ(nodeNames(g), (std::vector<std::string>{"x", "early", "late", "output"}));
  EXPECT_TRUE(verifyGraph(g));
}

TEST(GraphBuilder, NamesTheCycle) {
  Expected<Graph> g = TestGraph().input("x").op("Add", "a", {"x", "c"}).op("Relu", "b", {"a"})
                          .op("Relu", "c", {"b"}).output({"c"}).finish();
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code(), ErrorCode::InvalidGraph);
  EXPECT_NE(g.error().message().find("cycle"), std::string::npos);
  EXPECT_NE(g.error().message().find("'a'"), std::string::npos);
  EXPECT_NE(g.error().message().find("'c'"), std::string::npos);
}

TEST(GraphBuilder, NamesADanglingInput) {
  Expected<Graph> g = TestGraph().input("x").op("Add", "a", {"x", "ghost"}).output({"a"}).finish();
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code(), ErrorCode::InvalidGraph);
  EXPECT_NE(g.error().message().find("'a'"), std::string::npos);
  EXPECT_NE(g.error().message().find("'ghost' names no value"), std::string::npos);
}

TEST(GraphBuilder, RejectsADanglingGraphOutput) {
  Expected<Graph> g = TestGraph().input("x").op("Relu", "a", {"x"}).output({"nothing"}).finish();
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message().find("'nothing'"), std::string::npos);
}

TEST(GraphBuilder, RejectsDuplicateNodeNames) {
  NodeSpec spec;
  spec.name = "a";
  spec.opType = "Relu";
  spec.inputs = {"x"};
  spec.outputs = {{"other", ValueType::tensor(DType::F32, {4, 4})}};
  Expected<Graph> g = TestGraph().input("x").op("Relu", "a", {"x"}).node(spec).output({"a"}).finish();
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message().find("duplicate node name 'a'"), std::string::npos);
}

// ONNX keeps node names apart from value names: an op node may share its name with an
// initializer, a graph input or the output node. The op node gives way ("<name>_<k>").
TEST(GraphBuilder, AnOpNodeNamedLikeAnInputParameterOrOutputGivesWay) {
  auto op = [](std::string name, std::string type, std::vector<std::string> inputs, std::string output) {
    NodeSpec spec;
    spec.name = std::move(name);
    spec.opType = std::move(type);
    spec.inputs = std::move(inputs);
    spec.outputs = {{std::move(output), ValueType::tensor(DType::F32, {4, 4})}};
    return spec;
  };
  Expected<Graph> g = TestGraph()
                          .input("x")
                          .param("w")
                          .node(op("w", "MatMul", {"x", "w"}, "h"))
                          .node(op("x", "Relu", {"h"}, "y"))
                          .node(op("output", "Relu", {"y"}, "z"))
                          .node(op("w_0", "Relu", {"z"}, "last")) // taken before the MatMul is renamed
                          .output({"last"})
                          .finish();
  ASSERT_TRUE(g) << g.error().message();
  std::vector<std::pair<NodeKind, std::string>> names;
  for (std::uint32_t n = 0; n < g->numNodes(); ++n)
    names.emplace_back(g->kind(NodeId{n}), std::string(g->name(NodeId{n})));
  const std::vector<std::pair<NodeKind, std::string>> want{
      {NodeKind::Input, "x"},      {NodeKind::Parameter, "w"}, {NodeKind::Op, "w_1"},        {NodeKind::Op, "x_0"},
      {NodeKind::Op, "output_0"}, {NodeKind::Op, "w_0"},      {NodeKind::Output, "output"}};
  EXPECT_EQ(names, want);
}

TEST(GraphBuilder, RejectsDuplicateValueNamesAndNamesBothProducers) {
  NodeSpec spec;
  spec.name = "second";
  spec.opType = "Relu";
  spec.inputs = {"x"};
  spec.outputs = {{"a", ValueType::tensor(DType::F32, {4, 4})}};
  Expected<Graph> g = TestGraph().input("x").op("Relu", "a", {"x"}).node(spec).output({"a"}).finish();
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message().find("duplicate value name 'a'"), std::string::npos);
  EXPECT_NE(g.error().message().find("'second'"), std::string::npos);
}

TEST(GraphBuilder, RequiresOutputs) {
  GraphBuilder builder;
  builder.addInput("x", ValueType::tensor(DType::F32, {1}));
  Expected<Graph> g = std::move(builder).finish();
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message().find("no outputs"), std::string::npos);
}

TEST(GraphBuilder, GeneratesNamesThatAvoidTakenOnes) {
  NodeSpec unnamed;
  unnamed.opType = "Relu";
  unnamed.inputs = {"x"};
  unnamed.outputs = {{"y0", ValueType::tensor(DType::F32, {4, 4})}};
  NodeSpec second = unnamed;
  second.inputs = {"y0"};
  second.outputs = {{"y1", ValueType::tensor(DType::F32, {4, 4})}};
  Graph g = TestGraph().input("x").op("Relu", "Relu_0", {"x"}).node(unnamed).node(second)
                .output({"y1", "Relu_0"}).build();
  EXPECT_EQ(nodeNames(g), (std::vector<std::string>{"x", "Relu_0", "Relu_1", "Relu_2", "output"}));
}

TEST(GraphBuilder, OmittedOperandsAndDuplicateUsesKeepOneUser) {
  NodeSpec spec;
  spec.name = "resize";
  spec.opType = "Resize";
  spec.inputs = {"x", "", "x"};
  spec.outputs = {{"y", ValueType::tensor(DType::F32, {8, 8})}};
  Graph g = TestGraph().input("x").node(spec).output({"y"}).build();
  NodeId resize = g.findNode("resize");
  ASSERT_EQ(g.inputs(resize).size(), 3u);
  EXPECT_EQ(g.inputs(resize)[1], kNoValue);
  EXPECT_EQ(g.users(g.findValue("x")).size(), 1u);
  EXPECT_TRUE(verifyGraph(g));
}

TEST(GraphBuilder, SymbolicDimsHaveUnknownBytes) {
  GraphBuilder builder;
  ValueType type;
  type.kind = ValueKind::Tensor;
  type.dtype = DType::F16;
  type.shape.rankKnown = true;
  type.shape.dims = {Dim{-1, "batch"}, Dim{8, {}}};
  builder.addInput("x", type);
  builder.setOutputs({"x"});
  Expected<Graph> g = std::move(builder).finish();
  ASSERT_TRUE(g);
  ValueId x = g->findValue("x");
  EXPECT_EQ(g->bytes(x), -1);
  EXPECT_EQ(formatShape(g->valueType(x).shape), "[batch,8]");
}

TEST(GraphPrinter, PrintsOneLinePerNodeDeterministically) {
  auto make = [] {
    return TestGraph().input("x").param("w").op("MatMul", "mm", {"x", "w"}).output({"mm"}).build();
  };
  std::string text = printGraph(make());
  EXPECT_EQ(text, printGraph(make()));
  EXPECT_NE(text.find("%x : f32[4,4] = placeholder"), std::string::npos);
  EXPECT_NE(text.find("%mm : f32[4,4] = MatMul(%x, %w)"), std::string::npos);
  EXPECT_NE(text.find("output(%mm)"), std::string::npos);
}

TEST(Graph, ReadsInlineParameterData) {
  Graph g = TestGraph().input("x").param("w", {2}).op("Add", "a", {"x", "w"}).output({"a"}).build();
  Expected<std::string> data = g.readParameterData(g.parameters(g.findNode("w"))[0]);
  ASSERT_TRUE(data);
  EXPECT_EQ(*data, std::string(8, '\1'));
}

} // namespace
} // namespace cleave::ir
