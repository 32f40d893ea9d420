#include "io/fx.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "ir/analysis.h"

namespace cleave::io {
namespace {

// x -> linear (call_module with 2 parameters) -> relu -> output
const char* kLinearRelu = R"({
  "schema": "cleave.fx_graph", "version": 1, "graph_name": "M",
  "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "inputs": [], "users": ["fc"],
     "value": {"kind": "tensor", "dtype": "float32", "shape": [2, 8]}},
    {"name": "fc", "op": "call_module", "target": "fc", "op_target": "torch.nn.modules.linear.Linear",
     "scope": "fc", "args": [{"node": "x"}], "inputs": ["x"], "users": ["relu", "size"],
     "value": {"kind": "tensor", "dtype": "float32", "shape": [2, 4]},
     "parameters": [{"name": "fc.weight", "dtype": "float32", "shape": [4, 8], "bytes": 128},
                    {"name": "fc.bias", "dtype": "float32", "shape": [4], "bytes": 16}]},
    {"name": "relu", "op": "call_function", "target": "torch.relu", "op_target": "torch.relu",
     "args": [{"node": "fc"}], "inputs": ["fc"], "users": ["output"],
     "value": {"kind": "tensor", "dtype": "float32", "shape": [2, 4]}},
    {"name": "size", "op": "call_method", "target": "size", "op_target": "size",
     "args": [{"node": "fc"}], "inputs": ["fc"], "users": ["output"],
     "value": {"kind": "shape", "python_type": "Size"}},
    {"name": "output", "op": "output", "target": "output", "inputs": ["relu", "size"], "users": []}
  ]})";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(FxReader, ReadsKindsTargetsParametersAndValues) {
  Expected<ir::Graph> graph = parseFxGraph(kLinearRelu, "test.json");
  ASSERT_TRUE(graph) << graph.error().message();
  const ir::Graph& g = *graph;
  ASSERT_EQ(g.numNodes(), 5u);
  ir::NodeId fc = g.findNode("fc");
  EXPECT_EQ(g.kind(fc), ir::NodeKind::ModuleCall);
  EXPECT_EQ(g.opType(fc), "torch.nn.modules.linear.Linear");
  EXPECT_EQ(g.scope(fc), "fc");
  EXPECT_EQ(g.parameterBytes(fc), 144);
  EXPECT_EQ(g.kind(g.findNode("size")), ir::NodeKind::MethodCall);
  EXPECT_EQ(g.valueKind(g.findValue("size")), ir::ValueKind::Shape);
  EXPECT_EQ(g.bytes(g.findValue("relu")), 32);
  EXPECT_EQ(g.graphOutputs().size(), 2u);
  EXPECT_EQ(g.modelInfo().format, ir::SourceFormat::Fx);
  EXPECT_TRUE(ir::verifyGraph(g));
}

TEST(FxReader, RejectsAnotherSchemaVersion) {
  Expected<ir::Graph> graph = parseFxGraph(replace(kLinearRelu, "\"version\": 1", "\"version\": 7"), "v7.json");
  ASSERT_FALSE(graph);
  EXPECT_EQ(graph.error().code(), ErrorCode::ParseError);
  EXPECT_NE(graph.error().message().find("version 7 is not supported"), std::string::npos);
  EXPECT_NE(graph.error().message().find("v7.json"), std::string::npos);
}

TEST(FxReader, RejectsAnotherSchema) {
  Expected<ir::Graph> graph = parseFxGraph(R"({"schema": "x", "version": 1, "nodes": []})", "s.json");
  ASSERT_FALSE(graph);
  EXPECT_NE(graph.error().message().find("not a cleave FX graph"), std::string::npos);
}

TEST(FxReader, RejectsInvalidJson) {
  Expected<ir::Graph> graph = parseFxGraph("{\"schema\": ", "broken.json");
  ASSERT_FALSE(graph);
  EXPECT_NE(graph.error().message().find("invalid JSON"), std::string::npos);
}

TEST(FxReader, RejectsAnUnknownOp) {
  Expected<ir::Graph> graph = parseFxGraph(replace(kLinearRelu, "\"op\": \"call_method\"", "\"op\": \"call_magic\""), "f.json");
  ASSERT_FALSE(graph);
  EXPECT_NE(graph.error().message().find("node 'size' has unknown op 'call_magic'"), std::string::npos);
}

TEST(FxReader, RejectsAnUnknownDtype) {
  Expected<ir::Graph> graph = parseFxGraph(replace(kLinearRelu, "\"dtype\": \"float32\", \"shape\": [2, 8]", "\"dtype\": \"float7\", \"shape\": [2, 8]"), "f.json");
  ASSERT_FALSE(graph);
  EXPECT_NE(graph.error().message().find("unknown dtype 'float7'"), std::string::npos);
}

TEST(FxReader, RejectsADanglingInput) {
  Expected<ir::Graph> graph = parseFxGraph(replace(kLinearRelu, "\"inputs\": [\"fc\"], \"users\": [\"output\"]", "\"inputs\": [\"ghost\"], \"users\": [\"output\"]"), "f.json");
  ASSERT_FALSE(graph);
  EXPECT_EQ(graph.error().code(), ErrorCode::InvalidGraph);
  EXPECT_NE(graph.error().message().find("'ghost' names no value"), std::string::npos);
}

TEST(FxReader, RejectsUsersThatDisagreeWithInputs) {
  Expected<ir::Graph> graph = parseFxGraph(replace(kLinearRelu, "\"users\": [\"relu\", \"size\"]", "\"users\": [\"relu\"]"), "f.json");
  ASSERT_FALSE(graph);
  EXPECT_NE(graph.error().message().find("node 'fc' lists users"), std::string::npos);
}

TEST(FxReader, RequiresAnOutputNode) {
  std::string text = kLinearRelu;
  text = replace(text, ",\n    {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"inputs\": [\"relu\", \"size\"], \"users\": []}", "");
  Expected<ir::Graph> graph = parseFxGraph(text, "f.json");
  ASSERT_FALSE(graph);
  EXPECT_NE(graph.error().message().find("no output node"), std::string::npos);
}

TEST(FxReader, ReadsTheExampleExports) {
  for (const char* name : {"cnn.fx.json", "transformer.fx.json", "dlrm.fx.json"}) {
    Expected<ir::Graph> graph = readFxGraph(std::string(CLEAVE_SOURCE_DIR) + "/examples/" + name);
    ASSERT_TRUE(graph) << graph.error().message();
    EXPECT_GT(ir::computeGraphStats(*graph).parameterBytes, 0) << name;
  }
}

} // namespace
} // namespace cleave::io
