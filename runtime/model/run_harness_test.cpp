// A model timed through the runtime's API alone (runtime/model/run_harness.h), as `cleave run
// --repeat --baseline --profile` times it: paired runs, sorted times, the profile's ops, and a
// pipeline plan run microbatch by microbatch giving the whole model's outputs.
#include "runtime/model/run_harness.h"

#include <gtest/gtest.h>

#include "runtime/model/backend.h"
#include "testing/test_graphs.h"
#include "testing/test_plans.h"

namespace cleave::runtime {
namespace {

// t = tanh(tanh(x w1) w2), x f32[8,4]; and its two-stage pipeline plan.
class RunHarnessTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::vector<float> w1, w2;
    for (int i = 0; i < 16; ++i) {
      w1.push_back(0.1f * static_cast<float>(i % 5 - 2));
      w2.push_back(0.2f * static_cast<float>(i % 3 - 1));
    }
    testing::TestGraph g;
    g.input("x", {8, 4}).param("w1", {4, 4}, w1).param("w2", {4, 4}, w2);
    g.op("MatMul", "h", {"x", "w1"}, {8, 4}).op("Tanh", "a", {"h"}, {8, 4});
    g.op("MatMul", "g", {"a", "w2"}, {8, 4}).op("Tanh", "t", {"g"}, {8, 4});
    const ir::Graph graph = g.output({"t"}).build();
    testing::writePipelinePlan(graph, modelPath(), planPath(), 2);
    Expected<std::unique_ptr<Backend>> backend = makeBackend("aten-cpu");
    ASSERT_TRUE(backend) << backend.error().message();
    backend_ = std::move(*backend);
  }
  std::string modelPath() const { return dir_.file("m.onnx"); }
  std::string planPath() const { return dir_.file("plan"); }

  Runnable open(const std::string& path) const {
    Expected<Runnable> runnable = Runnable::open(path, *backend_, *backend_);
    EXPECT_TRUE(runnable) << runnable.error().message();
    return std::move(*runnable);
  }

  testing::ScratchDir dir_{"cleave_run_harness"};
  std::unique_ptr<Backend> backend_;
};

TEST_F(RunHarnessTest, PairedRunsAreTimedSortedAndProfiled) {
  Runnable model = open(modelPath()), baseline = open(modelPath());
  const TensorMap inputs{{"x", at::sin(at::arange(32, at::kFloat)).reshape({8, 4})}};
  Expected<HarnessResult> timed = timeRuns(model, at::kCPU, inputs, &baseline, {.repeat = 5, .profile = true});
  ASSERT_TRUE(timed) << timed.error().message();
  const TimedRuns& times = timed->times;
  ASSERT_EQ(times.seconds.size(), 5u);
  ASSERT_EQ(times.baselineSeconds.size(), 5u);
  ASSERT_EQ(times.ratios.size(), 5u);
  EXPECT_TRUE(std::is_sorted(times.seconds.begin(), times.seconds.end()));
  EXPECT_TRUE(std::is_sorted(times.ratios.begin(), times.ratios.end()));
  EXPECT_GT(times.seconds.front(), 0.0);
  EXPECT_GE(times.lastRunSeconds, times.seconds.front());
  EXPECT_EQ(times.submodules, 1u);
  EXPECT_FALSE(times.replay); // the CPU records nothing to replay
  EXPECT_TRUE(times.stats.secondsByOp.count("MatMul")) << "the profile times every kernel";
  EXPECT_TRUE(times.stats.secondsByOp.count("Tanh"));
  EXPECT_GT(times.peakResidentBytes, 0);
  ASSERT_EQ(times.outputs.size(), 1u);
  EXPECT_EQ(times.outputs[0].name, "t");
  EXPECT_EQ(times.outputs[0].shape, (std::vector<std::int64_t>{8, 4}));
  EXPECT_EQ(times.outputs[0].summary, summarize(timed->outputs.at("t")));
}

TEST_F(RunHarnessTest, APlanRunMicrobatchByMicrobatchGivesTheWholeModelsOutputs) {
  Runnable model = open(modelPath()), plan = open(planPath());
  const TensorMap inputs{{"x", at::cos(at::arange(32, at::kFloat)).reshape({8, 4})}};
  Expected<HarnessResult> whole = timeRuns(model, at::kCPU, inputs, nullptr, {.repeat = 1});
  Expected<HarnessResult> staged = timeRuns(plan, at::kCPU, inputs, nullptr, {.repeat = 2, .microbatches = 2});
  ASSERT_TRUE(whole) << whole.error().message();
  ASSERT_TRUE(staged) << staged.error().message();
  EXPECT_EQ(staged->times.submodules, 2u);
  EXPECT_EQ(staged->times.timings.size(), 2u); // one per stage, its microbatches summed
  EXPECT_TRUE(staged->times.baselineSeconds.empty());
  EXPECT_TRUE(at::allclose(staged->outputs.at("t"), whole->outputs.at("t"), 1e-6, 1e-7));
}

} // namespace
} // namespace cleave::runtime
