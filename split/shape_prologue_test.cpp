#include "split/shape_prologue.h"

#include <gtest/gtest.h>

#include "split/splitter.h"
#include "testing/test_graphs.h"

namespace cleave::split {
namespace {
using cleave::testing::TestGraph;

// An integer op `name` = opType(inputs) of `rank1Length` int64 elements.
ir::NodeSpec integerOp(const std::string& opType, const std::string& name, std::vector<std::string> inputs,
                       std::int64_t length) {
  ir::NodeSpec spec;
  spec.opType = opType;
  spec.name = name;
  spec.inputs = std::move(inputs);
  spec.outputs.push_back({name, ir::ValueType::tensor(ir::DType::I64, {length})});
  return spec;
}

// x -> a(Relu) -> s(Shape) -> t(Abs) -> b(Reshape a by t) -> d(Relu): a view whose shape is
// computed from a tensor's dims, as dynamic-shape exports write x.view(x.size(0), -1).
TestGraph viewedByItsOwnShape() {
  TestGraph graph;
  graph.input("x", {4, 8}).op("Relu", "a", {"x"});
  graph.node(integerOp("Shape", "s", {"a"}, 2)).node(integerOp("Abs", "t", {"s"}, 2));
  graph.op("Reshape", "b", {"a", "t"}, {4, 8}).op("Relu", "d", {"b"});
  return graph;
}

support::Profile profile(const std::string& json) {
  Expected<support::Profile> parsed = support::Profile::fromJson(json, "test");
  EXPECT_TRUE(parsed) << parsed.error().message();
  return std::move(*parsed);
}

std::vector<std::string> names(const ir::Graph& graph, const ShapePrologue& prologue) {
  std::vector<std::string> out;
  for (ir::NodeId node : prologue.nodes)
    out.emplace_back(graph.name(node));
  return out;
}

std::size_t submodules(const ir::Graph& graph, const support::Profile& accelerator, bool shapePrologue) {
  SplitDecisions decided = decideForSplit(graph, accelerator, shapePrologue);
  Expected<SplitResult> result = splitGraph(graph, decided.decisions, {});
  EXPECT_TRUE(result);
  return result ? result->plan.submodules.size() : 0;
}

TEST(ShapePrologue, ShapeArithmeticOfAnAccReshapeStaysWithIt) {
  ir::Graph graph = viewedByItsOwnShape().output({"d"}).build();
  support::Profile accelerator = profile(R"({"ops": ["Relu", "Reshape"]})");
  SplitDecisions decided = decideForSplit(graph, accelerator, true);
  EXPECT_EQ(names(graph, decided.prologue), (std::vector<std::string>{"s", "t"}));
  EXPECT_EQ(decided.prologue.byOp.at("Shape"), 1u);
  EXPECT_TRUE(decided.decisions[graph.findNode("t")].supported);
  EXPECT_EQ(submodules(graph, accelerator, true), 1u);
  EXPECT_EQ(submodules(graph, accelerator, false), 3u); // acc a, cpu s t, acc b d
}

TEST(ShapePrologue, ANodeReadAsDataOrAsAnOutputStaysOnTheCpu) {
  support::Profile accelerator = profile(R"({"ops": ["Relu", "Reshape", "Cast"]})");
  // t read as data: a Cast to float feeds the model's values, so t and s stay on the CPU.
  ir::NodeSpec cast = integerOp("Cast", "c", {"t"}, 2);
  cast.outputs[0].type = ir::ValueType::tensor(ir::DType::F32, {2});
  ir::Graph readAsData = viewedByItsOwnShape().node(cast).output({"d", "c"}).build();
  EXPECT_TRUE(decideForSplit(readAsData, accelerator, true).prologue.nodes.empty());
  // t is a graph output: the host prologue would hand it out, so it stays; s follows it.
  ir::Graph asOutput = viewedByItsOwnShape().output({"d", "t"}).build();
  EXPECT_TRUE(decideForSplit(asOutput, accelerator, true).prologue.nodes.empty());
}

TEST(ShapePrologue, OnlyOnnxGraphsAndOnlyWhenAsked) {
  support::Profile accelerator = profile(R"({"ops": ["Relu", "Reshape"]})");
  ir::Graph graph = viewedByItsOwnShape().output({"d"}).build();
  EXPECT_TRUE(decideForSplit(graph, accelerator, false).prologue.nodes.empty());
  EXPECT_FALSE(decideForSplit(graph, accelerator, false).decisions[graph.findNode("s")].supported);
  // A node denied by name is the user's word: never taken (and s, read only by t, stays too).
  support::Profile denying = profile(R"({"ops": ["Relu", "Reshape", "Abs"], "deny": ["t"]})");
  EXPECT_TRUE(decideForSplit(graph, denying, true).prologue.nodes.empty());
}

} // namespace
} // namespace cleave::split
