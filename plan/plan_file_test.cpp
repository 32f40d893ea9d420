#include "plan/plan_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "base/file_io.h"
#include "plan/materialize.h"
#include "testing/test_graphs.h"

namespace cleave::plan {
namespace {
namespace fs = std::filesystem;
using cleave::testing::TestGraph;

// x -> a (acc) -> b (cpu) -> c (acc) -> y, c also reads a: a skip across the CPU submodule.
ir::Graph threeStageGraph() {
  TestGraph g;
  g.input("x").param("w", {4, 4}).op("MatMul", "a", {"x", "w"}).op("Relu", "b", {"a"}).op("Add", "c", {"b", "a"});
  return g.output({"c"}).build();
}

CutPlan planOf(const ir::Graph& graph, PlanKind kind) {
  CutPlan plan;
  plan.kind = kind;
  plan.submodules = {{"s0", true, {graph.findNode("a")}}, {"s1", false, {graph.findNode("b")}},
                     {"s2", true, {graph.findNode("c")}}};
  plan.placement = IdVector<ir::NodeId, Placement>(graph.numNodes(), Placement::NotPlaced);
  plan.detail = IdVector<ir::NodeId, std::string>(graph.numNodes());
  indexSubmodules(graph, plan);
  return plan;
}

TEST(PlanFile, RoundTripsForEveryKind) {
  ir::Graph graph = threeStageGraph();
  for (PlanKind kind : {PlanKind::Split, PlanKind::Partition, PlanKind::Pipeline}) {
    CutPlan plan = planOf(graph, kind);
    Json extra = {{"settings", {{"z_last", 1}, {"a_first", 2}}}, {"profile", "p"}};
    PlanFile described = describePlan(graph, plan, computeBoundaries(graph, plan), "m.onnx", extra, true);
    ASSERT_TRUE(verifyPlanFile(described));
    std::string text = formatPlanFile(described);
    Expected<PlanFile> back = parsePlanFile(text, ".", "plan.json");
    ASSERT_TRUE(back) << back.error().message();
    EXPECT_EQ(*back, described);
    EXPECT_EQ(formatPlanFile(*back), text); // byte for byte, nested key order kept
    const PlanFileSubmodule& last = back->submodules[2];
    EXPECT_EQ(last.inputs.size(), 2u); // b from s1, a from s0 (the skip)
    EXPECT_EQ(back->runsOnAccelerator(back->submodules[1]), kind == PlanKind::Partition);
    // Self-describing: every value crossing a seam, with dtype, static shape and bytes.
    ASSERT_EQ(back->values.size(), 4u); // x, a, b, c
    EXPECT_EQ(back->values[0].name, "x");
    EXPECT_EQ(back->values[0].dtype, "f32");
    EXPECT_EQ(back->values[0].shape, (std::vector<PlanFileDim>{{4, ""}, {4, ""}}));
    EXPECT_EQ(back->values[0].bytes, 64);
  }
}

TEST(PlanFile, RefusesPlansThatDoNotHold) {
  auto error = [](const std::string& text) {
    Expected<PlanFile> plan = parsePlanFile(text, ".", "plan.json");
    EXPECT_FALSE(plan);
    return plan ? std::string() : plan.error().message();
  };
  const std::string head = R"({"schema": "cleave.plan", "version": 1, "kind": "split", "model": "m",)";
  EXPECT_NE(error(R"({"schema": "other"})").find("not a cleave plan"), std::string::npos);
  EXPECT_NE(error(R"({"schema": "cleave.plan", "version": 7, "submodules": []})").find("version 7 is not supported"),
            std::string::npos);
  EXPECT_NE(error(head + R"("submodules": [{"name": "a", "inputs": [{"value": "v", "from": "b"}], "outputs": []},
                                          {"name": "b", "inputs": [], "outputs": ["v"]}]})")
                .find("reads 'v' from 'b', which no earlier submodule"),
            std::string::npos);
  EXPECT_NE(error(head + R"("submodules": [{"name": "a", "inputs": [], "outputs": []},
                                          {"name": "a", "inputs": [], "outputs": []}]})")
                .find("repeated"),
            std::string::npos);
  EXPECT_NE(error(head + R"("submodules": [{"name": "a", "file": "../x.onnx", "inputs": [], "outputs": []}]})")
                .find("lies outside its folder"),
            std::string::npos);
  EXPECT_NE(error(head + R"("submodules": [{"name": 3, "inputs": [], "outputs": []}]})").find("must be string"),
            std::string::npos);
  EXPECT_NE(error(head + R"("submodules": [], "outputs": [{"value": "y", "from": "nobody"}]})").find("output 'y'"),
            std::string::npos);
}

TEST(PlanFile, MaterializedPlanReadsBack) {
  fs::path dir = fs::temp_directory_path() / ("cleave_plan_file_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ir::Graph graph = threeStageGraph();
  CutPlan plan = planOf(graph, PlanKind::Split);
  Expected<OutputDirectory> out = OutputDirectory::open((dir / "out").string(), {});
  ASSERT_TRUE(out);
  ASSERT_TRUE(materialize(graph, plan, "m.onnx", *out, Json::object(), {}));
  Expected<PlanFile> back = readPlan((dir / "out").string());
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->submodules.size(), 3u);
  EXPECT_EQ(back->submodules[0].file, "s0.onnx");
  EXPECT_EQ(formatPlanFile(*back), *readFile((dir / "out" / "plan.json").string()));
  fs::remove_all(dir);
}

} // namespace
} // namespace cleave::plan
