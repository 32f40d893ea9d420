#include "runtime/model/loaded_plan.h"

#include <gtest/gtest.h>

#include "plan/materialize.h"
#include "runtime/model/cut_model.h"
#include "runtime/model/plan_backends.h"
#include "testing/test_graphs.h"
#include "testing/test_plans.h"

namespace cleave::runtime {
namespace {

// x -> a (p0) -> b (p1) -> c (p2) -> y; c also reads a (a skip over p1); devices 0, 1, 2.
// Device 1 names aten-cpu-bf16 in device_backends.
class LoadedPlanTest : public ::testing::Test {
protected:
  void SetUp() override {
    testing::TestGraph g;
    g.input("x").param("w", {4, 4}).op("MatMul", "a", {"x", "w"}).op("Relu", "b", {"a"}).op("Add", "c", {"b", "a"});
    graph_ = g.output({"c"}).build();
    plan::CutPlan& cut = cut_;
    cut.kind = plan::PlanKind::Partition;
    const char* const names[] = {"p0", "p1", "p2"};
    const char* const nodes[] = {"a", "b", "c"};
    for (std::int64_t s = 0; s < 3; ++s)
      cut.submodules.push_back({names[s], plan::SubmoduleRole::Partition, {graph_.findNode(nodes[s])}, {s}, -1});
    plan::indexSubmodules(graph_, cut);
    Expected<OutputDirectory> out = OutputDirectory::open(planDir(), {});
    ASSERT_TRUE(out);
    Json extra = Json::object();
    extra["device_backends"] = {{"1", "aten-cpu-bf16"}};
    ASSERT_TRUE(plan::materialize(graph_, cut, "m.onnx", *out, extra, {}));
  }
  std::string planDir() const { return dir_.file("plan"); }

  testing::ScratchDir dir_{"cleave_loaded_plan"};
  ir::Graph graph_;
  plan::CutPlan cut_;
};

TEST_F(LoadedPlanTest, RoutesEveryValueFromItsProducerToItsReadersInPlanOrder) {
  Expected<LoadedPlan> loaded = LoadedPlan::load(planDir(), 2);
  ASSERT_TRUE(loaded) << loaded.error().message();
  ASSERT_EQ(loaded->size(), 3u);
  EXPECT_EQ(loaded->graphInputs(), std::vector<std::string>{"x"});
  EXPECT_EQ(loaded->outputs(), std::vector<std::string>{"c"});
  // Ids in plan order: p0 reads x, makes a; p1 reads a, makes b; p2 reads b and a, makes c.
  const std::vector<std::string> order = {"x", "a", "b", "c"};
  ASSERT_EQ(loaded->values(), order.size());
  for (std::uint32_t v = 0; v < order.size(); ++v) {
    EXPECT_EQ(loaded->route(v).name, order[v]);
    EXPECT_EQ(*loaded->valueId(order[v]), v);
  }
  EXPECT_EQ(loaded->routeOf("x").producer, kGraphInput);
  EXPECT_EQ(loaded->routeOf("a").producer, 0);
  EXPECT_EQ(loaded->routeOf("a").readers, (std::vector<std::uint32_t>{1, 2})); // the skip included
  EXPECT_EQ(loaded->routeOf("c").producer, 2);
  EXPECT_TRUE(loaded->routeOf("c").readers.empty());
  EXPECT_TRUE(loaded->routeOf("c").planOutput);
  EXPECT_FALSE(loaded->routeOf("a").planOutput);
  EXPECT_FALSE(loaded->valueId("w")); // a parameter never crosses a seam
  // Placement: loop placement over 2 ranks, each partition on its first device, device 1's backend.
  const std::vector<int> ranks = {0, 1, 0};
  for (std::size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(loaded->submodules()[s].rank, ranks[s]);
    EXPECT_EQ(loaded->submodules()[s].device, static_cast<std::int64_t>(s));
    EXPECT_NE(loaded->submodules()[s].graph, nullptr);
  }
  EXPECT_EQ(loaded->submodules()[0].backend, "");
  EXPECT_EQ(loaded->submodules()[1].backend, "aten-cpu-bf16");
}

TEST_F(LoadedPlanTest, EveryLoadNumbersValuesAlike) {
  Expected<LoadedPlan> one = LoadedPlan::load(planDir(), 1), other = LoadedPlan::load(planDir(), 3);
  ASSERT_TRUE(one && other);
  ASSERT_EQ(one->values(), other->values());
  for (std::uint32_t v = 0; v < one->values(); ++v)
    EXPECT_EQ(one->route(v).name, other->route(v).name);
  EXPECT_EQ(other->submodules()[2].rank, 2);
}

TEST_F(LoadedPlanTest, APlanInMemoryIsTheModelOfTheDirectorySplitWouldWrite) {
  Expected<LoadedPlan> fromDisk = LoadedPlan::load(planDir(), 2);
  Expected<LoadedPlan> inMemory = LoadedPlan::fromCut(graph_, cut_, 2);
  ASSERT_TRUE(fromDisk && inMemory) << (inMemory ? fromDisk.error().message() : inMemory.error().message());
  EXPECT_EQ(inMemory->dir(), "");
  ASSERT_EQ(inMemory->size(), fromDisk->size());
  for (std::size_t s = 0; s < fromDisk->size(); ++s) {
    const PlacedSubmodule &a = fromDisk->submodules()[s], &b = inMemory->submodules()[s];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.inputs, b.inputs);
    EXPECT_EQ(a.outputs, b.outputs);
    EXPECT_EQ(a.rank, b.rank);
    EXPECT_EQ(a.graph->numNodes(), b.graph->numNodes());
  }
  ASSERT_EQ(inMemory->values(), fromDisk->values());
  for (std::uint32_t v = 0; v < fromDisk->values(); ++v) {
    EXPECT_EQ(inMemory->route(v).name, fromDisk->route(v).name);
    EXPECT_EQ(inMemory->route(v).producer, fromDisk->route(v).producer);
    EXPECT_EQ(inMemory->route(v).readers, fromDisk->route(v).readers);
  }
}

TEST_F(LoadedPlanTest, PlacesEachSubmoduleOnItsDevicesBackendForInferenceAndTraining) {
  Expected<std::unique_ptr<Backend>> cpu = makeBackend("aten-cpu");
  ASSERT_TRUE(cpu);
  Expected<LoadedPlan> loaded = LoadedPlan::load(planDir());
  ASSERT_TRUE(loaded);
  PlanBackends backends(**cpu, **cpu, {});
  Expected<const Backend*> first = backends.of(loaded->submodules()[0]), second = backends.of(loaded->submodules()[1]);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(*first, cpu->get());
  EXPECT_EQ((*second)->name(), "aten-cpu-bf16");
  EXPECT_EQ(*backends.of(loaded->submodules()[1]), *second); // made once
  // A bfloat16 backend does not train (no float32 master weights); aten-cpu does.
  Expected<std::unique_ptr<Executor>> refused = (*second)->lowerTrainable(loaded->submodules()[1].graph);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("does not train"), std::string::npos) << refused.error().message();
  EXPECT_TRUE((*first)->lowerTrainable(loaded->submodules()[0].graph));
  // CutModel reports the same placement per submodule.
  Expected<CutModel> model = CutModel::load(planDir(), **cpu, **cpu);
  ASSERT_TRUE(model) << model.error().message();
  std::vector<SubmoduleTiming> timings;
  Expected<TensorMap> inputs = model->randomInputs(0, {});
  ASSERT_TRUE(inputs);
  ASSERT_TRUE(model->run(*inputs, &timings));
  ASSERT_EQ(timings.size(), 3u);
  EXPECT_EQ(timings[0].backend, "aten-cpu");
  EXPECT_EQ(timings[1].backend, "aten-cpu-bf16");
}

TEST_F(LoadedPlanTest, ADistributedRankLowersOnlyItsOwnSubmodules) {
  Expected<std::unique_ptr<Backend>> cpu = makeBackend("aten-cpu");
  ASSERT_TRUE(cpu);
  CutModelOptions options;
  options.rank = 1;
  options.worldSize = 2;
  Expected<CutModel> model = CutModel::load(planDir(), **cpu, **cpu, options);
  ASSERT_TRUE(model) << model.error().message();
  EXPECT_EQ(model->modules(), 1u);
  Expected<TensorMap> inputs = model->randomInputs(0, {});
  ASSERT_TRUE(inputs);
  Expected<TensorMap> refused = model->runStep(0, *inputs);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("not lowered in this process"), std::string::npos);
}

} // namespace
} // namespace cleave::runtime
