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
  using enum SubmoduleRole;
  SubmoduleRole first = kind == PlanKind::Split ? Accelerator : kind == PlanKind::Partition ? Partition : Stage;
  SubmoduleRole second = kind == PlanKind::Split ? Cpu : first;
  CutPlan plan;
  plan.kind = kind;
  plan.submodules = {{"s0", first, {graph.findNode("a")}, {}, -1},
                     {"s1", second, {graph.findNode("b")}, {}, -1},
                     {"s2", first, {graph.findNode("c")}, {}, -1}};
  if (kind == PlanKind::Partition)
    for (std::int64_t s = 0; s < 3; ++s)
      plan.submodules[s].devices = {s, 3};
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
    EXPECT_EQ(runsOnAccelerator(back->submodules[1].role), kind == PlanKind::Partition);
    EXPECT_EQ(back->submodules[0].role, plan.submodules[0].role);
    EXPECT_EQ(back->submodules[2].devices, plan.submodules[2].devices);
    // Self-describing: every value crossing a seam, with dtype, static shape and bytes.
    ASSERT_EQ(back->values.size(), 4u); // x, a, b, c
    EXPECT_EQ(back->values[0].name, "x");
    EXPECT_EQ(back->values[0].dtype, "f32");
    EXPECT_EQ(back->values[0].shape, (std::vector<PlanFileDim>{{4, ""}, {4, ""}}));
    EXPECT_EQ(back->values[0].bytes, 64);
  }
}

// A partition's device backends: read back by logical id; anything but ids to names is refused.
TEST(PlanFile, DeviceBackendsReadBackAndRefuseWhatIsNotIdsToNames) {
  PlanFile plan;
  Expected<std::map<std::int64_t, std::string>> none = deviceBackends(plan, "p");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  plan.extra["device_backends"] = {{"0", "aten-cpu"}, {"3", "aten-cpu-bf16"}};
  Expected<std::map<std::int64_t, std::string>> named = deviceBackends(plan, "p");
  ASSERT_TRUE(named) << named.error().message();
  EXPECT_EQ(*named, (std::map<std::int64_t, std::string>{{0, "aten-cpu"}, {3, "aten-cpu-bf16"}}));
  for (Json bad : {Json::array(), Json{{"x", "aten-cpu"}}, Json{{"1", 5}}, Json{{"2a", "aten-cpu"}}}) {
    plan.extra["device_backends"] = bad;
    Expected<std::map<std::int64_t, std::string>> refused = deviceBackends(plan, "p");
    ASSERT_FALSE(refused) << bad.dump();
    EXPECT_NE(refused.error().message().find("device_backends"), std::string::npos);
  }
}

TEST(PlanFile, RefusesPlansThatDoNotHold) {
  auto error = [](const std::string& text) {
    Expected<PlanFile> plan = parsePlanFile(text, ".", "plan.json");
    EXPECT_FALSE(plan);
    return plan ? std::string() : plan.error().message();
  };
  const std::string head = R"({"schema": "cleave.plan", "version": 2, "kind": "split", "model": "m",)";
  EXPECT_NE(error(R"({"schema": "other"})").find("not a cleave plan"), std::string::npos);
  EXPECT_NE(error(R"({"schema": "cleave.plan", "version": 7, "submodules": []})").find("version 7 is not supported"),
            std::string::npos);
  EXPECT_NE(error(R"({"schema": "cleave.plan", "version": 1, "submodules": []})").find("cleave reads version 2"),
            std::string::npos);
  EXPECT_NE(error(head + R"("submodules": [{"name": "a", "role": "gpu", "inputs": [], "outputs": []}]})")
                .find("unknown role 'gpu' (acc, cpu, partition or stage)"),
            std::string::npos);
  EXPECT_NE(error(head + R"("submodules": [{"name": "a", "role": "cpu", "inputs": [{"value": "v", "from": "b"}], "outputs": []},
                                          {"name": "b", "role": "cpu", "inputs": [], "outputs": ["v"]}]})")
                .find("reads 'v' from 'b', which no earlier submodule"),
            std::string::npos);
  EXPECT_NE(error(head + R"("submodules": [{"name": "a", "role": "cpu", "inputs": [], "outputs": []},
                                          {"name": "a", "role": "cpu", "inputs": [], "outputs": []}]})")
                .find("repeated"),
            std::string::npos);
  EXPECT_NE(error(head + R"("submodules": [{"name": "a", "role": "cpu", "file": "../x.onnx", "inputs": [], "outputs": []}]})")
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

TEST(Plan, VerifyNamesTheBrokenRule) {
  ir::Graph graph = threeStageGraph();
  auto message = [&](const CutPlan& plan) {
    Status status = verify(graph, plan);
    return status ? std::string() : status.error().message();
  };
  CutPlan good = planOf(graph, PlanKind::Split);
  EXPECT_EQ(message(good), "");
  CutPlan twice = good;
  twice.submodules[2].nodes.push_back(graph.findNode("a"));
  indexSubmodules(graph, twice);
  EXPECT_NE(message(twice).find("'a' is in submodules 's0' and 's2'"), std::string::npos);
  CutPlan missing = good;
  missing.submodules[1].nodes.clear();
  indexSubmodules(graph, missing);
  EXPECT_NE(message(missing).find("'b' is in no submodule"), std::string::npos);
  CutPlan backwards = good;
  std::swap(backwards.submodules[0], backwards.submodules[1]);
  indexSubmodules(graph, backwards);
  EXPECT_NE(message(backwards).find("'b' in 's1' reads 'a' from 'a', which runs after it"), std::string::npos);
  CutPlan tooSmall = planOf(graph, PlanKind::Partition);
  tooSmall.submodules[0].memoryLimitBytes = 63; // w is 4x4 f32: 64 bytes
  EXPECT_NE(message(tooSmall).find("'s0' reads 64 bytes of parameters, over its limit of 63"), std::string::npos);
  tooSmall.submodules[0].memoryLimitBytes = 64;
  EXPECT_EQ(message(tooSmall), "");
  CutPlan unsorted = good;
  unsorted.reasons = {{graph.findNode("c"), 1, ""}, {graph.findNode("b"), 1, ""}};
  EXPECT_NE(message(unsorted).find("not sorted"), std::string::npos);
  unsorted.reasons = {{graph.findNode("w"), 1, ""}};
  EXPECT_NE(message(unsorted).find("not an operation"), std::string::npos);
}

TEST(Plan, MaterializeRefusesABrokenPlan) {
  fs::path dir = fs::temp_directory_path() / ("cleave_plan_broken_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ir::Graph graph = threeStageGraph();
  CutPlan plan = planOf(graph, PlanKind::Split);
  plan.submodules[1].nodes.clear();
  indexSubmodules(graph, plan);
  Expected<OutputDirectory> out = OutputDirectory::open((dir / "out").string(), {});
  ASSERT_TRUE(out);
  Status status = materialize(graph, plan, "m.onnx", *out, Json::object(), {});
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code(), ErrorCode::InvalidGraph);
  EXPECT_FALSE(fs::exists(dir / "out" / "plan.json"));
  fs::remove_all(dir);
}

} // namespace
} // namespace cleave::plan
