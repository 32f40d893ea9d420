// runtime/distributed/pipeline_train_state.h - PipelineTrainer's private state (pipeline_train.h),
// shared by the files that implement it, one job each: the trainer's public face and the plan's
// loading (pipeline_train.cpp), the messages a step sends and receives in order
// (pipeline_train_messages.cpp), a stage's forward and backward compute
// (pipeline_train_compute.cpp), the collectives across ranks and replicas (tied weights, replica
// sums, the loss and gradient norm: pipeline_train_collectives.cpp) and a step's timing and memory
// (pipeline_train_timing.cpp). Nothing outside those files includes it.
// Complexity: as pipeline_train.h says, per step.
#pragma once

#include "runtime/distributed/pipeline_train.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include "base/file_io.h"
#include "base/strings.h"
#include "io/onnx.h"
#include "pipeline/nccl_streams.h"
#include "pipeline/schedule.h"
#include "plan/plan_file.h"
#include "runtime/engine/executor.h"
#include "runtime/engine/forward_replay.h"
#include "runtime/engine/host_memory.h"
#include "runtime/engine/kernel.h"
#include "runtime/engine/running_statistics.h"
#include "runtime/model/microbatch.h"
#include "runtime/model/plan_backends.h"
#include "runtime/training/split_backward.h"
#include "runtime/training/trainable_set.h"
#include "runtime/distributed/message_name.h"
#include "runtime/distributed/plan_shapes.h"
#include "runtime/distributed/receive_order.h"
#include "runtime/distributed/replica_gradients.h"

namespace cleave::runtime::distributed {

inline double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Stage {
  std::string name, file;
  std::vector<std::string> inputs, outputs;
  std::shared_ptr<const ir::Graph> graph;
  const Backend* backend = nullptr;   // where it trains (PlanBackends: its device's, else the caller's)
  std::unique_ptr<Executor> executor; // own stages only
  int rank = 0;
};

// One microbatch on one own stage: its input leaves and its outputs (with their autograd graph)
// until its backward; then only the gradients of the leaves a stage on this rank made.
struct StageRun {
  TensorMap leaves, outputs, leafGrads;
  PendingWeightBackward pendingWeights; // after I, until W
  // Recompute::Stage: the forward's inputs and the generators' states before it, to run it again
  // with autograd's graph before the backward (outputs are then without one until that).
  TensorMap feeds;
  GeneratorStates generatorState;
};

// Trainable tensors of a graph (storage owners, floating, not buffers): name -> (dtype, dims).
inline std::map<std::string, std::pair<ir::DType, std::vector<std::int64_t>>> trainedShapes(const ir::Graph& g) {
  std::map<std::string, std::pair<ir::DType, std::vector<std::int64_t>>> shapes;
  for (std::uint32_t p = 0; p < g.numParameters(); ++p) {
    const ir::Parameter& param = g.parameter(ir::ParamId{p});
    if (trains(g, ir::ParamId{p}))
      shapes[param.name] = {param.dtype, param.dims};
  }
  return shapes;
}

// What training changes in a stage, as written at the end: its trained tensors and the running
// statistics its forwards update (running_statistics.h), by name.
inline std::map<std::string, std::pair<ir::DType, std::vector<std::int64_t>>> changedShapes(const ir::Graph& g) {
  auto shapes = trainedShapes(g);
  for (ir::ParamId statistic : updatedRunningStatistics(g))
    shapes[g.parameter(statistic).name] = {g.parameter(statistic).dtype, g.parameter(statistic).dims};
  return shapes;
}

// How many compute actions ahead a rank posts its receives: pipeline/nccl_streams.h's (the
// schedule check reports with it).
constexpr std::size_t kReceiveLookahead = pipeline::kReceiveLookahead;

struct PipelineTrainer::State {
  Communicator* comm = nullptr;
  // Data parallel: the ranks holding this pipeline rank in every replica (null: one replica),
  // this replica's place among them, and this step's gradient sums across them.
  Communicator* replicas = nullptr;
  int replica = 0, replicaCount = 1;
  std::int64_t stepIndex = 0; // the step running (dropout's seeds: seedForward)
  ReplicaGradients replicaGradients;
  TrainOptions options;
  std::vector<Stage> stages;
  std::optional<LoadedPlan> plan; // stages' placement, values' ids, producers and readers
  std::unique_ptr<PlanBackends> backends; // the stages' (Stage::backend points into it)
  std::string loss;
  int lossStage = -1;
  // Parameters several stages hold: name -> (dtype, dims), and this rank's copies of each.
  std::map<std::string, std::pair<ir::DType, std::vector<std::int64_t>>> tied;
  std::map<std::string, std::vector<at::Tensor>> ownCopies; // in stage order
  std::map<std::string, int> firstHolder;                   // parameter -> first stage holding it
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::vector<std::pair<std::string, at::Tensor>> optimized; // "STAGE/NAME": the optimizer's tensors, in order
  StepTiming timing; // the last step's
  std::int64_t stepPeakBytes = 0; // the allocator's peak in the step before the running action's
  std::int64_t actionReceivedBytes = 0; // what the running action received
  std::vector<std::int64_t> microbatchShapes; // this step's shape class per microbatch (ShapeClasses)
  ShapeClasses shapeClasses;
  std::set<std::pair<std::int64_t, std::uint32_t>> planGivesShape; // (shape class, value id) keyed (declared or learned)
  std::optional<PlanShapes> planShapes; // the plan's value types
  // The receive order of steps under this schedule whose microbatches had these shape classes
  // (its shape keys follow them): planned once, posted anew each step.
  struct PlannedReceives {
    const pipeline::Schedule* schedule = nullptr;
    std::vector<std::int64_t> shapes;
    bool backward = true; // false: held-out evaluation's forwards alone
    ReceiveOrder order;
  };
  std::optional<PlannedReceives> receiveOrder;

  int rank = 0, worldSize = 1; // this process's place (known before connecting)
  bool own(int stage) const { return stages[stage].rank == rank; }
  // The stage that makes a value (kGraphInput: the data), the stages that read it, and its id.
  int producerOf(const std::string& value) const { return plan->routeOf(value).producer; }
  const std::vector<std::uint32_t>& readersOf(const std::string& value) const { return plan->routeOf(value).readers; }
  std::uint32_t idOf(const std::string& value) const { return *plan->valueId(value); }
  bool hasLocalReader(const std::string& value) const {
    const std::vector<std::uint32_t>& readers = readersOf(value);
    return std::any_of(readers.begin(), readers.end(), [&](std::uint32_t reader) { return own(static_cast<int>(reader)); });
  }
  // Tags: (microbatch, value, reading stage, direction) packed densely; < 2^30 (see communicator).
  Expected<std::uint32_t> tag(std::size_t m, const std::string& value, int reader, bool backward) const {
    return messageTag(messageSpace(), {m, idOf(value), static_cast<std::uint64_t>(reader), backward});
  }
  MessageSpace messageSpace() const { return {plan->values(), stages.size()}; }
  // The communicator's shape key of a message: its value, reading stage and direction, and the
  // shape class of its microbatch's inputs (a value's shape follows them: their rows, a sequence
  // length that changes every step), declared on both ranks from the plan (or learned from the
  // key's first message: plan_shapes.h's static-batch exports).
  // 0 (no key: a header with every message, as inference sends them) when the plan leaves the
  // value's shape open, so a shape that changes from one message to the next still travels.
  std::uint64_t shapeKey(std::size_t m, const std::string& value, int reader, bool backward) const {
    const std::uint32_t id = idOf(value);
    if (!planGivesShape.count({microbatchShapes[m], id}))
      return 0;
    return messageShapeKey(messageSpace(), {m, id, static_cast<std::uint64_t>(reader), backward}, microbatchShapes[m]);
  }

  Status loadPlan(const std::string& dir, pipeline::Placement placement);
  Status forwardStage(std::size_t m, int stage, const TensorMap& chunk, std::vector<std::map<int, StageRun>>& runs,
                      double& loss, double share);
  Status outputGradients(const pipeline::Action& action, std::vector<std::map<int, StageRun>>& runs, double share,
                         std::vector<at::Tensor>& roots, std::vector<at::Tensor>& grads);
  Status backwardStage(std::size_t m, int stage, std::vector<std::map<int, StageRun>>& runs, double share,
                       bool inputsOnly);
  Status weightBackwardStage(std::size_t m, int stage, std::vector<std::map<int, StageRun>>& runs);
  // Declares to the communicator the shape of every message this rank sends or receives for a
  // microbatch like `chunk` (both directions: a gradient has its value's shape), from the plan's
  // value types with symbolic dims bound by the data's; a message whose shape that leaves open
  // has no key (shapeKey).
  void declareMessageShapes(const TensorMap& chunk, std::size_t m);
  // What `sender` sends after action `a`, in the order it sends it: a forward's outputs to each
  // reading stage on another rank (outputs in the stage's order, readers ascending); a
  // backward's (B or I) gradients of the stage's inputs made on other ranks, by input name (the
  // order of its leaves). The one description of the sends: this rank sends through it, and
  // replays its peers' through it to post receives in their order (receive_order.h).
  Expected<std::vector<OutgoingMessage>> sendsOf(int sender, const pipeline::Action& a) const;
  // This step's receives, each channel's in its sender's order, for this rank's `actions`
  // (`backward` false: forwards alone, as held-out evaluation runs them).
  Expected<ReceiveOrder> planReceives(const pipeline::Schedule* schedule, std::size_t microbatches,
                                      const std::vector<pipeline::Action>& actions, bool backward) const;
  // The receive order for `actions`, planned once per schedule, microbatch shape classes and
  // direction and restarted: posted anew.
  Expected<ReceiveOrder*> restartReceives(const pipeline::Schedule* schedule, std::size_t microbatches,
                                          const std::vector<pipeline::Action>& actions, bool backward);
  // Records the microbatches' shape classes (declaring the message shapes of classes not seen
  // before) and returns each one's share of the batch's rows (its loss's weight).
  std::vector<double> startMicrobatches(const std::vector<TensorMap>& chunks);
  // comm->recv of `value` for `action` (what a receive that fails names: the stage, its action and
  // microbatch, the value and the peer), its wait counted in the step's timing, its bytes in the
  // action's (allocated when the receive was posted, before the action began).
  Expected<at::Tensor> receive(int src, std::uint32_t tag, std::uint64_t key, const pipeline::Action& action,
                               const std::string& value) {
    auto started = std::chrono::steady_clock::now();
    Expected<at::Tensor> tensor = comm->recv(src, tag, key);
    timing.rankWaitSeconds[static_cast<std::size_t>(rank)] += secondsSince(started);
    timing.rankReceives[static_cast<std::size_t>(rank)] += 1.0;
    if (!tensor)
      return Error(tensor.error().code())
             << "stage '" << stages[action.stage].name << "', action " << pipeline::formatAction(action)
             << " (microbatch " << action.microbatch << "), receiving "
             << (action.type == pipeline::ActionType::Forward ? "'" : "the gradient of '") << value << "' from rank "
             << src << ": " << tensor.error().message();
    actionReceivedBytes += static_cast<std::int64_t>(tensor->nbytes());
    return tensor;
  }
  Status reduceTiedGradients();
  // Where a tied parameter's sums are made: on this rank's copies (a stage's device), else the CPU.
  at::Device tiedDevice(std::map<std::string, std::vector<at::Tensor>>::const_iterator copies) const {
    return copies != ownCopies.end() && !copies->second.empty() ? copies->second.front().device() : at::Device(at::kCPU);
  }
  // Zeroes the step's timing (StepTiming) for `microbatches` microbatches.
  void resetTiming(std::size_t microbatches);
  // Runs one F, B, I or W of this rank's order (SEND/RECV: nothing, implied by them) and records
  // its start, end, receive wait and compute seconds in the step's timeline.
  Status runAction(const pipeline::Action& action, const std::vector<TensorMap>& chunks,
                   const std::vector<double>& shares, std::vector<std::map<int, StageRun>>& runs, double& lossSum,
                   std::chrono::steady_clock::time_point started);
  // Around one compute action: folds the allocator's peak so far into stepPeakBytes and starts
  // the action's own (returns the bytes in use); then records what a forward left allocated, or
  // how far a backward rose and, the stage's first to make them, its parameters' gradients
  // (StepTiming::stageForwardBytes, stageBackwardBytes, stageGradientBytes).
  std::int64_t beginActionMemory();
  void recordActionMemory(const pipeline::Action& action, std::int64_t bytesBefore);
  // Data parallel: starts the sum across replicas of stage i's gradients; after the schedule,
  // waits for every sum (timed) and writes them back (none: nothing to do).
  Status startReplicaSum(int stage);
  Status finishReplicaSums();
  // Data parallel: this replica's share of a step's rows (the batch split in replicaCount equal
  // parts, as torch.chunk would; the whole batch with one replica), in its microbatches.
  Expected<std::vector<TensorMap>> replicaMicrobatches(const TrainingData& data, std::int64_t stepIndex) const;
  // Per action of this rank's order: the stages whose parameters' gradients are complete after it
  // (the stage's last B or W of the step), so their sum across replicas can start then.
  std::vector<std::vector<int>> gradientsDoneAfter(const std::vector<pipeline::Action>& actions) const;
  Status broadcastTiedParameters();
  // Under mixed precision a stage's outputs may come out in bf16 where the plan's value is
  // float32: they cross to the next stage as the plan declares (a cast autograd differentiates,
  // so their gradients come back as float32 and turn bf16 inside the stage), so messages keep the
  // declared types, and one process and many ranks compute the same.
  Status keepPlanTypes(TensorMap& outputs) const;
  // A stage's forward in the options' precision, its outputs in the plan's types.
  Expected<TensorMap> runForward(int stage, const TensorMap& feeds);
  // Recompute::Stage: the forward of microbatch m again, with autograd's graph, from the same
  // inputs and generator state (so dropout draws the same), before its backward.
  Status recomputeForward(int stage, StageRun& run);
  // Collective: the step's loss (its stage's, then summed over the replicas) into `loss`, and the
  // L2 norm of every stage's gradients together, a tied parameter counted once (on its first
  // holder: pytorch/pytorch#180952 counts every copy): the same two on every rank. Each stage's
  // squared norm is summed on its rank, gathered with the loss into one vector (one non-zero per
  // slot, so the all-reduce adds exactly) and summed in stage order: every rank count gives the
  // same bits.
  Expected<double> reduceLossAndGradientNorm(double lossSum, double& loss);
};

} // namespace cleave::runtime::distributed
