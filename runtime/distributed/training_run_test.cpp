// Training through the runtime's API alone (runtime/distributed/training_run.h), as a C++ program or
// the Python package would: a model and its two-stage pipeline plan train in this process, step
// for step as ATen's own autograd and SGD train the same module, and what trained is written.
#include "runtime/distributed/training_run.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <filesystem>
#include <sstream>

#include "runtime/distributed/pipeline_train.h"
#include "runtime/engine/tensors.h"
#include "testing/test_graphs.h"
#include "testing/test_plans.h"

namespace cleave::runtime::distributed {
namespace {
namespace fs = std::filesystem;

constexpr std::int64_t kRows = 16, kBatch = 8, kSteps = 5;
constexpr double kLr = 0.1;

std::vector<float> ramp(std::int64_t count, float scale) {
  std::vector<float> values;
  for (std::int64_t i = 0; i < count; ++i)
    values.push_back(scale * static_cast<float>((i * 7) % 11 - 5));
  return values;
}

// Every step's record and the run's start and end, as a program's observer keeps them.
class RecordingObserver final : public TrainingObserver {
public:
  Status started(const TrainingStart& start) override {
    ++starts;
    trains = start.trainable.trains;
    return {};
  }
  Status stepped(const StepRecord& record) override {
    losses.push_back(record.result.loss);
    return {};
  }
  void ended(const TrainingEnd& end) override { stepsRun = end.steps; }

  int starts = 0;
  std::int64_t trains = 0, stepsRun = 0;
  std::vector<double> losses;
};

// loss = mean((tanh(x w1) w2 - y)^2), x f32[8,4], y f32[8,2]; cut into two pipeline stages.
class TrainingRunTest : public ::testing::Test {
protected:
  void SetUp() override {
    w1_ = ramp(16, 0.1f);
    w2_ = ramp(8, 0.2f);
    testing::TestGraph g;
    g.input("x", {kBatch, 4}).input("y", {kBatch, 2}).param("w1", {4, 4}, w1_).param("w2", {4, 2}, w2_);
    g.op("MatMul", "h", {"x", "w1"}, {kBatch, 4}).op("Tanh", "t", {"h"}, {kBatch, 4});
    g.op("MatMul", "p", {"t", "w2"}, {kBatch, 2}).op("Sub", "d", {"p", "y"}, {kBatch, 2});
    g.op("Mul", "s", {"d", "d"}, {kBatch, 2});
    ir::NodeSpec mean;
    mean.opType = "ReduceMean";
    mean.name = "loss";
    mean.inputs = {"s"};
    mean.outputs.push_back({"loss", ir::ValueType::tensor(ir::DType::F32, {})});
    ir::Attribute keepdims;
    keepdims.name = "keepdims";
    keepdims.intValue = 0; // a scalar loss
    mean.attributes.push_back(keepdims);
    graph_ = g.node(mean).output({"loss"}).build();
    testing::writePipelinePlan(graph_, modelPath(), planPath(), 2);

    x_ = at::sin(at::arange(kRows * 4, at::kFloat)).reshape({kRows, 4});
    y_ = at::cos(at::arange(kRows * 2, at::kFloat)).reshape({kRows, 2});
    ASSERT_TRUE(writeTensorFile({{"x", x_}, {"y", y_}}, dataPath()));
  }
  std::string modelPath() const { return dir_.file("m.onnx"); }
  std::string planPath() const { return dir_.file("plan"); }
  std::string dataPath() const { return dir_.file("data.json"); }

  TrainingRequest request(const std::string& model) const {
    TrainingRequest request;
    request.model = model;
    request.options.batch = kBatch;
    request.options.optimizer.lr = kLr;
    request.steps = kSteps;
    return request;
  }

  // What ATen's autograd and plain SGD give for the same rows, step by step.
  std::vector<double> referenceLosses() const {
    at::Tensor w1 = at::from_blob(const_cast<float*>(w1_.data()), {4, 4}, at::kFloat).clone().requires_grad_();
    at::Tensor w2 = at::from_blob(const_cast<float*>(w2_.data()), {4, 2}, at::kFloat).clone().requires_grad_();
    std::vector<double> losses;
    for (std::int64_t step = 0; step < kSteps; ++step) {
      const std::int64_t first = step * kBatch % kRows;
      at::Tensor x = x_.slice(0, first, first + kBatch), y = y_.slice(0, first, first + kBatch);
      at::Tensor loss = (at::tanh(x.matmul(w1)).matmul(w2) - y).pow(2).mean();
      losses.push_back(loss.item<double>());
      loss.backward();
      c10::NoGradGuard noGrad;
      for (at::Tensor* w : {&w1, &w2}) {
        w->sub_(w->grad() * kLr);
        w->mutable_grad().zero_();
      }
    }
    return losses;
  }

  testing::ScratchDir dir_{"cleave_training_run"};
  ir::Graph graph_;
  std::vector<float> w1_, w2_;
  at::Tensor x_, y_;
};

void expectNear(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i]))) << "step " << i + 1;
}

TEST_F(TrainingRunTest, AModelAndItsPipelinePlanTrainAsAutogradDoes) {
  const std::vector<double> want = referenceLosses();
  ASSERT_LT(want.back(), want.front()); // the reference itself learns

  // The model, its rows handed over in memory; what trained written into a folder of our own.
  TrainingRequest byModel = request(modelPath());
  Expected<std::unique_ptr<TrainingData>> rows = tensorRows({{"x", x_}, {"y", y_}});
  ASSERT_TRUE(rows) << rows.error().message();
  byModel.dataRows = std::move(*rows);
  const fs::path modelOut = dir_.path() / "trained_model";
  byModel.openOutput = [&]() -> Expected<std::string> {
    fs::create_directories(modelOut);
    return modelOut.string();
  };
  RecordingObserver model;
  std::ostringstream notes;
  Status trained = runTraining(byModel, model, notes);
  ASSERT_TRUE(trained) << trained.error().message();
  EXPECT_EQ(model.starts, 1);
  EXPECT_EQ(model.trains, 2);
  EXPECT_EQ(model.stepsRun, kSteps);
  expectNear(model.losses, want);
  EXPECT_TRUE(fs::is_regular_file(modelOut / "trained.onnx"));

  // Its two-stage plan, in this process (no RANK: every stage here, in GPipe order), rows read
  // from the file, 2 microbatches: the same losses.
  TrainingRequest byPlan = request(planPath());
  byPlan.data = dataPath();
  byPlan.options.microbatches = 2;
  RecordingObserver plan;
  trained = runTraining(byPlan, plan, notes);
  ASSERT_TRUE(trained) << trained.error().message();
  EXPECT_EQ(plan.trains, 2);
  expectNear(plan.losses, want);
}

TEST_F(TrainingRunTest, ARequestThatCannotRunFailsBeforeTheFirstStep) {
  RecordingObserver observer;
  std::ostringstream notes;
  TrainingRequest noData = request(modelPath());
  Status status = runTraining(noData, observer, notes);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code(), ErrorCode::Usage);
  EXPECT_NE(status.error().message().find("no training data"), std::string::npos) << status.error().message();

  TrainingRequest evalWithoutData = request(modelPath());
  evalWithoutData.data = dataPath();
  evalWithoutData.evalEvery = 2;
  status = runTraining(evalWithoutData, observer, notes);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code(), ErrorCode::Usage);

  TrainingRequest stageRecompute = request(modelPath());
  stageRecompute.data = dataPath();
  stageRecompute.options.recompute = Recompute::Stage;
  status = runTraining(stageRecompute, observer, notes);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code(), ErrorCode::Usage);
  EXPECT_EQ(observer.starts, 0); // refused before any step, on every path
}

// Rank 1 of 2 whose peer never answers: every receive fails as a timed-out Gloo receive does.
class SilentPeer final : public Communicator {
public:
  int rank() const override { return 1; }
  int worldSize() const override { return 2; }
  Status send(const at::Tensor&, int, std::uint32_t, std::uint64_t) override { return {}; }
  Expected<at::Tensor> recv(int src, std::uint32_t tag, std::uint64_t) override {
    return Error(ErrorCode::InvalidArgument) << "rank 1: receive from rank " << src << " (tag " << tag
                                             << ") failed: Timed out (timeout 3 s)";
  }
  void declareShape(int, std::uint64_t, at::ScalarType, std::vector<std::int64_t>) override {}
  Status postRecv(int, std::uint32_t, std::uint64_t) override { return {}; }
  Status finish() override { return {}; }
  void setMatching(ChannelMatching) override {}
  std::size_t headersSent() const override { return 0; }
  ReceiveBufferStats receiveBuffers() const override { return {}; }
  void resetReceiveBufferPeak() override {}
  double transportCpuSeconds() const override { return 0.0; }
  Status barrier() override { return {}; }
  Expected<std::vector<std::string>> exchangeText(const std::string&, const std::string& text) override {
    return std::vector<std::string>{text, text};
  }
  Status allReduceSum(at::Tensor&) override { return {}; }
  Status postAllReduceSum(const at::Tensor&) override { return {}; }
  Expected<std::unique_ptr<Communicator>> subgroup(const std::string&, const std::vector<int>&) override {
    return Error(ErrorCode::Unsupported) << "no subgroups";
  }
};

TEST_F(TrainingRunTest, AReceiveThatTimesOutNamesTheStageActionMicrobatchAndPeer) {
  Expected<std::unique_ptr<Backend>> backend = makeBackend(kHostBackend);
  ASSERT_TRUE(backend) << backend.error().message();
  TrainOptions options;
  options.batch = kBatch;
  options.microbatches = 2;
  Expected<std::unique_ptr<PipelineTrainer>> trainer = PipelineTrainer::create(planPath(), options, 1, 2, **backend);
  ASSERT_TRUE(trainer) << trainer.error().message();
  SilentPeer peer;
  ASSERT_TRUE((*trainer)->connect(peer));
  Expected<std::unique_ptr<TrainingData>> rows = tensorRows({{"x", x_}, {"y", y_}});
  ASSERT_TRUE(rows);
  Expected<StepResult> step = (*trainer)->step(**rows, 0);
  ASSERT_FALSE(step);
  const std::string& message = step.error().message();
  // Stage 1's first action is its forward of microbatch 0 (GPipe), which waits for stage 0's 'p' (the cut is after p).
  EXPECT_EQ(message.rfind("stage '" + (*trainer)->stageName(1) + "', action 1F0 (microbatch 0), receiving 'p' from rank 0: "
                          "rank 1: receive from rank 0 (tag ", 0),
            0u)
      << message;
  EXPECT_NE(message.find("Timed out (timeout 3 s)"), std::string::npos) << message;
}

} // namespace
} // namespace cleave::runtime::distributed
