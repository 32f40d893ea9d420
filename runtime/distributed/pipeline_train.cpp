#include "runtime/distributed/pipeline_train.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

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
#include "base/file_io.h"
#include "base/strings.h"

namespace cleave::runtime::distributed {

namespace {
double secondsSince(std::chrono::steady_clock::time_point start) {
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
std::map<std::string, std::pair<ir::DType, std::vector<std::int64_t>>> trainedShapes(const ir::Graph& g) {
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
std::map<std::string, std::pair<ir::DType, std::vector<std::int64_t>>> changedShapes(const ir::Graph& g) {
  auto shapes = trainedShapes(g);
  for (ir::ParamId statistic : updatedRunningStatistics(g))
    shapes[g.parameter(statistic).name] = {g.parameter(statistic).dtype, g.parameter(statistic).dims};
  return shapes;
}

} // namespace

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
  std::vector<std::int64_t> microbatchRows; // this step's, per microbatch
  std::set<std::pair<std::int64_t, std::uint32_t>> planGivesShape; // (rows, value id) keyed (declared or learned)
  std::optional<PlanShapes> planShapes; // the plan's value types
  std::set<std::int64_t> declaredRows; // microbatch row counts whose message shapes are declared
  // The receive order of steps under this schedule whose microbatches had these rows (its shape
  // keys follow them): planned once, posted anew each step.
  struct PlannedReceives {
    const pipeline::Schedule* schedule = nullptr;
    std::vector<std::int64_t> rows;
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
  // rows of its microbatch (a value's shape follows them), declared on both ranks from the plan
  // (or learned from the key's first message: plan_shapes.h's static-batch exports).
  // 0 (no key: a header with every message, as inference sends them) when the plan leaves the
  // value's shape open, so a shape that changes from one message to the next still travels.
  std::uint64_t shapeKey(std::size_t m, const std::string& value, int reader, bool backward) const {
    const std::uint32_t id = idOf(value);
    if (!planGivesShape.count({microbatchRows[m], id}))
      return 0;
    return messageShapeKey(messageSpace(), {m, id, static_cast<std::uint64_t>(reader), backward}, microbatchRows[m]);
  }

  Status loadPlan(const std::string& dir, pipeline::Placement placement);
  Status forwardStage(std::size_t m, int stage, const TensorMap& chunk, std::vector<std::map<int, StageRun>>& runs,
                      double& loss, double share);
  Status outputGradients(std::size_t m, int stage, std::vector<std::map<int, StageRun>>& runs, double share,
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
  // The receive order for `actions`, planned once per schedule, microbatch rows and direction and
  // restarted: posted anew.
  Expected<ReceiveOrder*> restartReceives(const pipeline::Schedule* schedule, std::size_t microbatches,
                                          const std::vector<pipeline::Action>& actions, bool backward);
  // Records the microbatches' rows (declaring the message shapes of rows not seen before) and
  // returns each one's share of the batch's rows (its loss's weight).
  std::vector<double> startMicrobatches(const std::vector<TensorMap>& chunks);
  // comm->recv, its wait counted in the step's timing, its bytes in the action's (allocated when
  // the receive was posted, before the action began).
  Expected<at::Tensor> receive(int src, std::uint32_t tag, std::uint64_t key) {
    auto started = std::chrono::steady_clock::now();
    Expected<at::Tensor> tensor = comm->recv(src, tag, key);
    timing.rankWaitSeconds[static_cast<std::size_t>(rank)] += secondsSince(started);
    timing.rankReceives[static_cast<std::size_t>(rank)] += 1.0;
    if (tensor)
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
  // parts, as torch.chunk would), the whole batch with one replica.
  Expected<TensorMap> replicaRows(const TrainingData& data, std::int64_t stepIndex) const;
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

// How many compute actions ahead a rank posts its receives: pipeline/nccl_streams.h's (the
// schedule check reports with it).
constexpr std::size_t kReceiveLookahead = pipeline::kReceiveLookahead;

void PipelineTrainer::State::declareMessageShapes(const TensorMap& chunk, std::size_t m) {
  const SymbolSizes symbols = planShapes->bind(chunk);
  for (std::uint32_t v = 0; v < plan->values(); ++v) {
    const ValueRoute& route = plan->route(v);
    const std::string& name = route.name;
    const int made = route.producer;
    if (made == kGraphInput)
      continue;
    for (int reader : route.readers) {
      int from = stages[made].rank, to = stages[reader].rank;
      if (from == to || (from != rank && to != rank))
        continue;
      if (std::optional<MessageShape> shape = planShapes->shapeOf(name, symbols)) {
        planGivesShape.insert({microbatchRows[m], v});
        if (!shape->declared) // keyed all the same: the key's first message carries its shape
          continue;
        int peer = from == rank ? to : from;
        comm->declareShape(peer, shapeKey(m, name, reader, false), shape->type, shape->dims);
        comm->declareShape(peer, shapeKey(m, name, reader, true), shape->type, shape->dims);
      }
    }
  }
}

Expected<std::vector<OutgoingMessage>> PipelineTrainer::State::sendsOf(int sender, const pipeline::Action& a) const {
  using pipeline::ActionType;
  std::vector<OutgoingMessage> out;
  const int i = static_cast<int>(a.stage);
  const std::size_t m = a.microbatch;
  if (a.type == ActionType::Forward) {
    for (const std::string& name : stages[i].outputs)
      for (std::uint32_t reader : readersOf(name))
        if (stages[reader].rank != sender) {
          CLEAVE_TRY(std::uint32_t t, tag(m, name, static_cast<int>(reader), false));
          out.push_back({stages[reader].rank, t, shapeKey(m, name, static_cast<int>(reader), false), name,
                         {reader, ActionType::Forward, a.microbatch}});
        }
  } else if (a.type == ActionType::Backward || a.type == ActionType::BackwardInput) {
    std::vector<std::string> made; // the inputs other stages make: the stage's leaves, by name
    for (const std::string& name : stages[i].inputs)
      if (producerOf(name) != kGraphInput)
        made.push_back(name);
    std::sort(made.begin(), made.end());
    for (const std::string& name : made) {
      const int producer = producerOf(name);
      if (stages[producer].rank == sender)
        continue;
      CLEAVE_TRY(std::uint32_t t, tag(m, name, i, true));
      out.push_back({stages[producer].rank, t, shapeKey(m, name, i, true), name,
                     {static_cast<std::uint32_t>(producer), ActionType::Backward, a.microbatch}});
    }
  }
  return out;
}

Expected<ReceiveOrder> PipelineTrainer::State::planReceives(const pipeline::Schedule* schedule, std::size_t microbatches,
                                                            const std::vector<pipeline::Action>& actions,
                                                            bool backward) const {
  const auto stageCount = static_cast<std::uint32_t>(stages.size());
  const auto ranks = static_cast<std::uint32_t>(worldSize);
  return ReceiveOrder::plan(
      rank, worldSize, actions,
      [&](int peer) {
        return pipeline::rankComputeActions(schedule, stageCount, static_cast<std::uint32_t>(microbatches), ranks,
                                            static_cast<std::uint32_t>(peer), backward);
      },
      [&](int sender, const pipeline::Action& a) { return sendsOf(sender, a); });
}

Status PipelineTrainer::State::loadPlan(const std::string& dir, pipeline::Placement placement) {
  CLEAVE_TRY(plan, LoadedPlan::load(dir, worldSize, placement));
  const plan::PlanFile& planFile = plan->file();
  std::map<std::string, int> holders;
  for (const PlacedSubmodule& sub : plan->submodules()) {
    const int index = static_cast<int>(stages.size());
    Stage stage;
    stage.name = sub.name;
    stage.file = sub.file;
    stage.rank = sub.rank;
    stage.inputs = sub.inputs;
    stage.outputs = sub.outputs;
    stage.graph = sub.graph;
    CLEAVE_TRY(stage.backend, backends->of(sub));
    for (auto& [name, shape] : trainedShapes(*stage.graph)) {
      if (++holders[name] == 2)
        tied[name] = shape;
      firstHolder.emplace(name, index);
    }
    stages.push_back(std::move(stage));
  }
  planShapes.emplace(planFile.values);
  // The loss: the output named --loss, else 'loss', else the only scalar output (as for a model).
  std::vector<std::string> scalars;
  for (const plan::PlanFileInput& output : planFile.outputs) {
    if (options.loss.empty() ? output.value == "loss" : output.value == options.loss)
      loss = output.value;
    for (const plan::PlanFileValue& value : planFile.values)
      if (value.name == output.value && value.kind == "tensor" && value.rankKnown && value.shape.empty())
        scalars.push_back(value.name);
  }
  if (loss.empty() && options.loss.empty() && scalars.size() == 1)
    loss = scalars[0];
  if (loss.empty())
    return Error(ErrorCode::InvalidArgument) << dir << ": no plan output named '"
                                             << (options.loss.empty() ? "loss" : options.loss)
                                             << "'" << (options.loss.empty() ? " and " + std::to_string(scalars.size()) + " scalar outputs" : "")
                                             << " (export the model with its loss; name it with --loss)";
  lossStage = producerOf(loss);
  return {};
}

Status PipelineTrainer::State::forwardStage(std::size_t m, int i, const TensorMap& chunk,
                                            std::vector<std::map<int, StageRun>>& runs, double& lossSum,
                                            double share) {
  {
    StageRun& run = runs[m][i];
    TensorMap feeds;
    for (const std::string& name : stages[i].inputs) {
      const int made = producerOf(name);
      at::Tensor value;
      if (made == kGraphInput) {
        value = chunk.at(name);
      } else if (own(made)) {
        // As a message would arrive (communicator.h: dense and contiguous): ATen's kernels may
        // round differently for other strides, and a stage must compute the same bytes whichever
        // rank produced its inputs.
        value = toDense(runs[m].at(made).outputs.at(name).detach()).contiguous();
      } else {
        CLEAVE_TRY(std::uint32_t t, tag(m, name, i, false));
        CLEAVE_TRY(value, receive(stages[made].rank, t, shapeKey(m, name, i, false)));
      }
      if (made != kGraphInput && at::isFloatingType(value.scalar_type()))
        value.requires_grad_(true);
      feeds[name] = value;
      if (made != kGraphInput)
        run.leaves[name] = value;
    }
    auto started = std::chrono::steady_clock::now();
    seedForward(options.seed, i, stepIndex, static_cast<std::int64_t>(m));
    if (options.recompute == Recompute::Stage) {
      // With the graph, then without it: the kernels take the paths the recomputation will
      // (without it, oneDNN's direct ones), so what is sent equals what is differentiated.
      run.generatorState = generatorStates();
      CLEAVE_TRY(run.outputs, runForward(i, feeds));
      for (auto& output : run.outputs)
        output.second = output.second.detach();
      run.feeds = std::move(feeds);
    } else {
      CLEAVE_TRY(run.outputs, runForward(i, feeds));
    }
    timing.forwardSeconds[i] += secondsSince(started);
    CLEAVE_TRY(std::vector<OutgoingMessage> sends,
               sendsOf(rank, {static_cast<std::uint32_t>(i), pipeline::ActionType::Forward, static_cast<std::uint32_t>(m)}));
    for (const OutgoingMessage& out : sends)
      CLEAVE_CHECK(comm->send(run.outputs.at(out.value).detach(), out.receiver, out.tag, out.shapeKey));
    if (i == lossStage)
      lossSum += run.outputs.at(loss).item<double>() * share;
    if (options.recompute == Recompute::Stage) // sent: held only where a stage of this rank reads it
      for (auto output = run.outputs.begin(); output != run.outputs.end();)
        output = hasLocalReader(output->first) ? std::next(output) : run.outputs.erase(output);
  }
  return {};
}

// The gradients arriving at a stage's outputs for microbatch m: from the stages reading each
// output (received, or taken from a local reader's leaf gradients) plus the loss's share.
// Returns the outputs that get one (roots) and their gradients.
Status PipelineTrainer::State::outputGradients(std::size_t m, int i, std::vector<std::map<int, StageRun>>& runs,
                                               double share, std::vector<at::Tensor>& roots,
                                               std::vector<at::Tensor>& grads) {
  StageRun& run = runs[m].at(i);
  for (const std::string& name : stages[i].outputs) {
    const at::Tensor& output = run.outputs.at(name);
    at::Tensor grad = name == loss ? at::full_like(output, share) : at::Tensor();
    for (int reader : readersOf(name)) {
      at::Tensor part;
      if (own(reader)) { // taken: this is its one use, and the step need not hold it on
        TensorMap& readerGrads = runs[m].at(reader).leafGrads;
        if (auto found = readerGrads.find(name); found != readerGrads.end()) {
          part = found->second.defined() ? found->second.contiguous() : at::Tensor(); // as a message arrives
          readerGrads.erase(found);
        }
      } else {
        CLEAVE_TRY(std::uint32_t t, tag(m, name, reader, true));
        CLEAVE_TRY(part, receive(stages[reader].rank, t, shapeKey(m, name, reader, true)));
        part = part.to(output.device()); // Gloo's arrive on the CPU, a stage may train on a GPU
      }
      if (part.defined())
        grad = grad.defined() ? grad + part : part;
    }
    if (grad.defined() && output.requires_grad()) {
      roots.push_back(output);
      grads.push_back(grad.to(output.scalar_type()));
    }
  }
  return {};
}

// B (whole backward) or I (inputs' gradients only; W later): backpropagates the stage's output
// gradients, then hands each leaf's gradient to its producer (kept for a local one, sent to a
// remote one; zeros where none reached it, since the producer waits for it).
Status PipelineTrainer::State::backwardStage(std::size_t m, int i, std::vector<std::map<int, StageRun>>& runs,
                                             double share, bool inputsOnly) {
  StageRun& run = runs[m].at(i);
  if (options.recompute == Recompute::Stage) { // before waiting for the output gradients
    auto started = std::chrono::steady_clock::now();
    CLEAVE_CHECK(recomputeForward(i, run));
    timing.backwardSeconds[i] += secondsSince(started);
  }
  std::vector<at::Tensor> roots, grads;
  CLEAVE_CHECK(outputGradients(m, i, runs, share, roots, grads));
  std::vector<std::string> leafNames;
  std::vector<at::Tensor> leaves, leafGrads;
  for (const auto& [name, leaf] : run.leaves) {
    leafNames.push_back(name);
    leaves.push_back(leaf);
  }
  auto started = std::chrono::steady_clock::now();
  if (inputsOnly) {
    Expected<std::vector<at::Tensor>> found = backwardInputs(roots, grads, leaves, run.pendingWeights);
    if (!found)
      return std::move(found.error().withContext("stage '" + stages[i].name + "'"));
    leafGrads = std::move(*found);
  } else {
    try {
      if (!roots.empty())
        torch::autograd::backward(roots, grads);
    } catch (const c10::Error& e) {
      return Error(ErrorCode::Unsupported) << "stage '" << stages[i].name << "': backward failed: "
                                           << firstLine(e.what_without_backtrace());
    }
    for (const at::Tensor& leaf : leaves)
      leafGrads.push_back(leaf.grad());
  }
  timing.backwardSeconds[i] += secondsSince(started);
  TensorMap sentGrads; // by leaf name
  for (std::size_t l = 0; l < leaves.size(); ++l) {
    const std::string& name = leafNames[l];
    if (own(producerOf(name)))
      run.leafGrads[name] = leafGrads[l];
    else
      sentGrads[name] = leafGrads[l].defined() ? leafGrads[l] : at::zeros_like(leaves[l]);
  }
  CLEAVE_TRY(std::vector<OutgoingMessage> sends,
             sendsOf(rank, {static_cast<std::uint32_t>(i), pipeline::ActionType::Backward, static_cast<std::uint32_t>(m)}));
  for (const OutgoingMessage& out : sends)
    CLEAVE_CHECK(comm->send(sentGrads.at(out.value), out.receiver, out.tag, out.shapeKey));
  run.leaves.clear(); // the activations of this stage and microbatch are no longer needed
  run.outputs.clear(); // (what W needs, pendingWeights keeps)
  return {};
}

// W: the parameters' gradients that stage i's I for microbatch m held back.
Status PipelineTrainer::State::weightBackwardStage(std::size_t m, int i, std::vector<std::map<int, StageRun>>& runs) {
  auto run = runs[m].find(i);
  if (run == runs[m].end())
    return Error(ErrorCode::InvalidArgument) << "stage '" << stages[i].name << "': W of microbatch " << m << " before its I";
  auto started = std::chrono::steady_clock::now();
  Status done = backwardWeights(run->second.pendingWeights);
  if (!done)
    return std::move(done.error().withContext("stage '" + stages[i].name + "'"));
  double seconds = secondsSince(started);
  timing.backwardSeconds[i] += seconds;
  timing.weightSeconds[i] += seconds;
  return {};
}

void PipelineTrainer::State::resetTiming(std::size_t microbatches) {
  for (std::vector<double>* perStage : {&timing.forwardSeconds, &timing.backwardSeconds, &timing.weightSeconds,
                                        &timing.stageForwardBytes, &timing.stageBackwardBytes, &timing.stageGradientBytes})
    perStage->assign(stages.size(), 0.0);
  for (std::vector<double>* perRank : {&timing.rankScheduleSeconds, &timing.rankWaitSeconds, &timing.rankReceives,
                                       &timing.rankTransportSeconds, &timing.rankPeakStepBytes,
                                       &timing.rankReplicaWaitSeconds})
    perRank->assign(static_cast<std::size_t>(worldSize), 0.0);
  timing.actionSeconds.assign(StepTiming::kSlotFields * StepTiming::kComputeTypes * stages.size() * microbatches, 0.0);
}

Status PipelineTrainer::State::runAction(const pipeline::Action& action, const std::vector<TensorMap>& chunks,
                                         const std::vector<double>& shares, std::vector<std::map<int, StageRun>>& runs,
                                         double& lossSum, std::chrono::steady_clock::time_point started) {
  const int stage = static_cast<int>(action.stage);
  const std::size_t m = action.microbatch;
  const double begun = secondsSince(started), waitedBefore = timing.rankWaitSeconds[static_cast<std::size_t>(rank)];
  const double computedBefore = timing.computeSeconds(action.stage);
  const std::int64_t bytesBefore = beginActionMemory();
  switch (action.type) {
  case pipeline::ActionType::Forward: CLEAVE_CHECK(forwardStage(m, stage, chunks[m], runs, lossSum, shares[m])); break;
  case pipeline::ActionType::Backward: CLEAVE_CHECK(backwardStage(m, stage, runs, shares[m], false)); break;
  case pipeline::ActionType::BackwardInput: CLEAVE_CHECK(backwardStage(m, stage, runs, shares[m], true)); break;
  case pipeline::ActionType::BackwardWeight: CLEAVE_CHECK(weightBackwardStage(m, stage, runs)); break;
  default: return {}; // SEND/RECV: implied by F and B
  }
  recordActionMemory(action, bytesBefore);
  double* slot =
      &timing.actionSeconds[StepTiming::kSlotFields * StepTiming::actionSlot(action.stage, m, chunks.size(), action.type)];
  slot[0] = begun;
  slot[1] = secondsSince(started);
  slot[2] = timing.rankWaitSeconds[static_cast<std::size_t>(rank)] - waitedBefore;
  slot[3] = rank;
  slot[4] = timing.computeSeconds(action.stage) - computedBefore;
  return {};
}

std::int64_t PipelineTrainer::State::beginActionMemory() {
  const HostMemoryStats now = hostMemoryStats();
  stepPeakBytes = std::max(stepPeakBytes, now.peakBytesInUse); // the step's peak outlives the action's
  resetHostMemoryPeak();
  actionReceivedBytes = 0;
  return now.bytesInUse;
}

void PipelineTrainer::State::recordActionMemory(const pipeline::Action& action, std::int64_t bytesBefore) {
  using pipeline::ActionType;
  const HostMemoryStats now = hostMemoryStats();
  const std::size_t stage = action.stage;
  // What it received counts as its own: allocated when the receive was posted, before it began.
  const std::int64_t received = actionReceivedBytes;
  if (action.type == ActionType::Forward) {
    timing.stageForwardBytes[stage] =
        std::max(timing.stageForwardBytes[stage], static_cast<double>(now.bytesInUse - bytesBefore + received));
    return;
  }
  double rise = static_cast<double>(now.peakBytesInUse - bytesBefore + received); // B, I or W
  if ((action.type == ActionType::Backward || action.type == ActionType::BackwardWeight) &&
      !timing.stageGradientBytes[stage]) { // the first to make the parameters' gradients, which stay
    double bytes = 0.0;
    for (const auto& [name, parameter] : stages[stage].executor->trainableParameters())
      bytes += static_cast<double>(parameter.numel() * static_cast<std::int64_t>(parameter.element_size()));
    timing.stageGradientBytes[stage] = bytes;
    rise = std::max(rise - bytes, 0.0);
  }
  timing.stageBackwardBytes[stage] = std::max(timing.stageBackwardBytes[stage], rise);
}

Status PipelineTrainer::State::startReplicaSum(int stage) {
  std::vector<at::Tensor> params;
  for (auto& entry : stages[stage].executor->trainableParameters())
    params.push_back(entry.second);
  return replicaGradients.start(*replicas, params);
}

Status PipelineTrainer::State::finishReplicaSums() {
  if (!replicas)
    return {};
  auto started = std::chrono::steady_clock::now();
  CLEAVE_CHECK(replicas->finish());
  timing.rankReplicaWaitSeconds[static_cast<std::size_t>(rank)] = secondsSince(started);
  replicaGradients.writeBack();
  return {};
}

Expected<TensorMap> PipelineTrainer::State::replicaRows(const TrainingData& data, std::int64_t stepIndex) const {
  if (options.batch % replicaCount != 0)
    return Error(ErrorCode::InvalidArgument) << "--batch " << options.batch << " does not split into " << replicaCount
                                             << " equal replica shares";
  const std::int64_t share = options.batch / replicaCount;
  return data.rows(stepIndex * options.batch + replica * share, share);
}

std::vector<double> PipelineTrainer::State::startMicrobatches(const std::vector<TensorMap>& chunks) {
  std::vector<double> shares;
  microbatchRows.clear();
  for (const TensorMap& chunk : chunks) {
    microbatchRows.push_back(chunk.begin()->second.size(0));
    shares.push_back(static_cast<double>(chunk.begin()->second.size(0)) / static_cast<double>(options.batch));
  }
  for (std::size_t m = 0; m < chunks.size(); ++m)
    if (declaredRows.insert(microbatchRows[m]).second)
      declareMessageShapes(chunks[m], m);
  return shares;
}

Expected<ReceiveOrder*> PipelineTrainer::State::restartReceives(const pipeline::Schedule* schedule,
                                                                std::size_t microbatches,
                                                                const std::vector<pipeline::Action>& actions,
                                                                bool backward) {
  if (!receiveOrder || receiveOrder->schedule != schedule || receiveOrder->rows != microbatchRows ||
      receiveOrder->backward != backward) {
    CLEAVE_TRY(ReceiveOrder planned, planReceives(schedule, microbatches, actions, backward));
    receiveOrder = PlannedReceives{schedule, microbatchRows, backward, std::move(planned)};
  }
  receiveOrder->order.restart();
  return &receiveOrder->order;
}

std::vector<std::vector<int>> PipelineTrainer::State::gradientsDoneAfter(
    const std::vector<pipeline::Action>& actions) const {
  std::vector<std::vector<int>> done(actions.size());
  std::vector<bool> seen(stages.size(), false);
  for (std::size_t k = actions.size(); k-- > 0;) { // the last one per stage, from the end
    const pipeline::Action& action = actions[k];
    const bool completes = action.type == pipeline::ActionType::Backward ||
                           action.type == pipeline::ActionType::BackwardWeight;
    if (completes && !seen[action.stage]) {
      seen[action.stage] = true;
      done[k].push_back(static_cast<int>(action.stage));
    }
  }
  for (int i = 0; i < static_cast<int>(stages.size()) && !actions.empty(); ++i)
    if (own(i) && !seen[static_cast<std::size_t>(i)]) // no backward here: its zeros are summed all the same
      done.back().push_back(i);
  return done;
}

Status PipelineTrainer::State::reduceTiedGradients() {
  for (const auto& [name, shape] : tied) {
    CLEAVE_TRY(at::ScalarType type, scalarTypeOf(shape.first));
    auto copies = ownCopies.find(name);
    at::Tensor sum = at::zeros(shape.second, at::TensorOptions().dtype(type).device(tiedDevice(copies)));
    if (copies != ownCopies.end())
      for (const at::Tensor& copy : copies->second)
        if (copy.grad().defined())
          sum += copy.grad();
    CLEAVE_CHECK(comm->allReduceSum(sum));
    if (copies != ownCopies.end())
      for (const at::Tensor& copy : copies->second)
        copy.mutable_grad() = sum.clone();
  }
  return {};
}

// Every copy of a tied parameter starts from the first holding stage's value (they are equal in a
// plan cut from one model; this makes it so for any plan). One all-reduce per tied parameter, in
// the same (name) order on every rank; holders other than the first contribute zeros.
Status PipelineTrainer::State::broadcastTiedParameters() {
  c10::NoGradGuard noGrad;
  for (const auto& [name, shape] : tied) {
    CLEAVE_TRY(at::ScalarType type, scalarTypeOf(shape.first));
    auto copies = ownCopies.find(name);
    at::Tensor value = at::zeros(shape.second, at::TensorOptions().dtype(type).device(tiedDevice(copies)));
    if (own(firstHolder.at(name)))
      value.copy_(copies->second.front());
    CLEAVE_CHECK(comm->allReduceSum(value));
    if (copies != ownCopies.end())
      for (const at::Tensor& copy : copies->second)
        copy.copy_(value);
  }
  return {};
}

Expected<TensorMap> PipelineTrainer::State::runForward(int i, const TensorMap& feeds) {
  TensorMap outputs;
  {
    std::optional<AutocastScope> precision;
    enterForwardPrecision(precision, options, stages[i].executor->device().type());
    CLEAVE_TRY(outputs, stages[i].executor->run(feeds));
  }
  if (options.precision != Precision::Fp32) // float32 runs make the plan's types already
    CLEAVE_CHECK(keepPlanTypes(outputs));
  return outputs;
}

Status PipelineTrainer::State::recomputeForward(int i, StageRun& run) {
  Expected<TensorMap> outputs = [&] {
    ForwardReplay replay(run.generatorState);
    return runForward(i, run.feeds);
  }();
  CLEAVE_TRY(run.outputs, std::move(outputs));
  run.feeds.clear();
  run.generatorState = GeneratorStates();
  return {};
}

Status PipelineTrainer::State::keepPlanTypes(TensorMap& outputs) const {
  for (auto& [name, tensor] : outputs) {
    const plan::PlanFileValue* declared = planShapes->value(name);
    if (!declared || !tensor.defined() || declared->kind != "tensor")
      continue;
    std::optional<ir::DType> dtype = ir::parseDTypeName(declared->dtype);
    if (!dtype)
      continue;
    CLEAVE_TRY(at::ScalarType type, scalarTypeOf(*dtype));
    if (tensor.scalar_type() != type && at::isFloatingType(tensor.scalar_type()) && at::isFloatingType(type))
      tensor = tensor.to(type);
  }
  return {};
}

Expected<double> PipelineTrainer::State::reduceLossAndGradientNorm(double lossSum, double& loss) {
  // One all-reduce: each stage's squared gradient norm, then the loss (the replicas' losses after).
  at::Tensor perStage = at::zeros({static_cast<std::int64_t>(stages.size()) + 1}, at::kDouble);
  perStage[static_cast<std::int64_t>(stages.size())] = lossSum;
  for (int i = 0; i < static_cast<int>(stages.size()); ++i) {
    if (!own(i))
      continue;
    std::vector<at::Tensor> counted;
    for (auto& [name, tensor] : stages[i].executor->trainableParameters())
      if (!tied.count(name) || firstHolder.at(name) == i)
        counted.push_back(tensor);
    perStage[i] = squaredGradientNorm(counted);
  }
  CLEAVE_CHECK(comm->allReduceSum(perStage));
  double sum = 0.0;
  const double* squares = perStage.data_ptr<double>();
  at::Tensor replicaLoss = at::full({1}, squares[stages.size()], at::kDouble);
  if (replicas)
    CLEAVE_CHECK(replicas->allReduceSum(replicaLoss));
  loss = replicaLoss.item<double>();
  for (std::size_t i = 0; i < stages.size(); ++i)
    sum += squares[i];
  return std::sqrt(sum);
}

PipelineTrainer::~PipelineTrainer() = default;

Expected<std::unique_ptr<PipelineTrainer>> PipelineTrainer::create(const std::string& planDir,
                                                                  const TrainOptions& options, int rank, int worldSize,
                                                                  const Backend& backend, pipeline::Placement placement) {
  std::unique_ptr<PipelineTrainer> trainer(new PipelineTrainer());
  trainer->state_ = std::make_unique<State>();
  State& s = *trainer->state_;
  s.rank = rank;
  s.worldSize = worldSize;
  s.options = options;
  s.backends = std::make_unique<PlanBackends>(backend, backend, Optimizations{});
  CLEAVE_CHECK(s.loadPlan(planDir, placement));
  CLEAVE_CHECK(checkTrainableAsExported(trainer->stageGraphs()));
  std::vector<at::Tensor> params;
  for (int i = 0; i < static_cast<int>(s.stages.size()); ++i) {
    if (!s.own(i))
      continue;
    Expected<std::unique_ptr<Executor>> executor = s.stages[i].backend->lowerTrainable(s.stages[i].graph);
    if (!executor)
      return std::move(executor.error().withContext("stage '" + s.stages[i].name + "'"));
    s.stages[i].executor = std::move(*executor);
    s.stages[i].executor->setSelectiveRecompute(options.recompute == Recompute::Selective);
    for (auto& [name, tensor] : s.stages[i].executor->trainableParameters()) {
      params.push_back(tensor);
      s.optimized.emplace_back(s.stages[i].name + "/" + name, tensor);
      if (s.tied.count(name))
        s.ownCopies[name].push_back(tensor);
    }
  }
  if (params.empty()) { // a rank without parameters still takes part; its optimizer has nothing to do
    params.push_back(at::zeros({1}).requires_grad_(true));
    s.optimized.emplace_back(kNoParameters, params.back());
  }
  s.optimizer = makeOptimizer(std::move(params), options.optimizer);
  return trainer;
}

Status PipelineTrainer::connect(Communicator& comm, Communicator* replicas) {
  State& s = *state_;
  if (comm.rank() != s.rank || comm.worldSize() != s.worldSize)
    return Error(ErrorCode::InvalidArgument) << "the communicator is rank " << comm.rank() << " of " << comm.worldSize()
                                             << ", the trainer rank " << s.rank << " of " << s.worldSize;
  s.comm = &comm;
  comm.setMatching(ChannelMatching::InOrder); // NCCL's rule, held on every transport (communicator.h)
  if (replicas && replicas->worldSize() > 1) {
    if (s.options.batch % replicas->worldSize() != 0)
      return Error(ErrorCode::InvalidArgument) << "--batch " << s.options.batch << " does not split into "
                                               << replicas->worldSize() << " equal replica shares";
    s.replicas = replicas;
    s.replica = replicas->rank();
    s.replicaCount = replicas->worldSize();
  }
  return s.broadcastTiedParameters();
}

Status PipelineTrainer::checkData(const TensorMap& data) const {
  for (const std::string& name : state_->plan->graphInputs())
    if (auto tensor = data.find(name); tensor != data.end())
      CLEAVE_CHECK(state_->planShapes->checkRows(name, tensor->second));
  return {};
}

Status PipelineTrainer::checkWholeModel(const ir::Graph& whole) const {
  std::map<std::string, std::pair<ir::DType, std::vector<std::int64_t>>> planShapes;
  std::set<std::string> heldFixed; // by the plan (--frozen given to cleave pipeline, a folded value)
  for (const Stage& stage : state_->stages) {
    planShapes.merge(trainedShapes(*stage.graph)); // tied copies agree (checked at create)
    for (std::uint32_t p = 0; p < stage.graph->numParameters(); ++p)
      if (stage.graph->parameter(ir::ParamId{p}).isBuffer())
        heldFixed.insert(stage.graph->parameter(ir::ParamId{p}).name);
  }
  auto wholeShapes = trainedShapes(whole);
  std::erase_if(wholeShapes, [&](const auto& entry) { return heldFixed.count(entry.first) > 0; });
  auto formatDims = [](const std::vector<std::int64_t>& dims) {
    return ir::formatShape(ir::ValueType::tensor(ir::DType::F32, dims).shape);
  };
  for (const auto& [name, shape] : wholeShapes) {
    auto found = planShapes.find(name);
    if (found == planShapes.end())
      return Error(ErrorCode::InvalidArgument) << "its parameter '" << name << "' is in no stage of the plan";
    if (found->second != shape)
      return Error(ErrorCode::InvalidArgument) << "its parameter '" << name << "' is " << ir::dtypeName(shape.first)
                                               << formatDims(shape.second) << ", the plan's "
                                               << ir::dtypeName(found->second.first) << formatDims(found->second.second);
  }
  for (const auto& entry : planShapes)
    if (!wholeShapes.count(entry.first))
      return Error(ErrorCode::InvalidArgument) << "the plan's parameter '" << entry.first << "' is not in it";
  return {};
}

Status PipelineTrainer::writeTrained(const std::string& planDir, const std::string& outDir, const ir::Graph* whole) {
  State& s = *state_;
  std::vector<std::pair<std::string, at::Tensor>> gathered; // rank 0: every stage's, for `whole`
  std::set<std::string> gatheredNames;
  // Tags above every step's (< 2^29): one per (stage, parameter) in stage and name order.
  auto tag = static_cast<std::uint32_t>(kMessageTagLimit);
  for (int i = 0; i < static_cast<int>(s.stages.size()); ++i) {
    Stage& stage = s.stages[i];
    const auto shapes = changedShapes(*stage.graph); // by name: the order of the messages
    const std::uint32_t first = tag;
    tag += static_cast<std::uint32_t>(shapes.size());
    std::map<std::string, at::Tensor> own;
    if (s.own(i)) {
      for (auto& [name, tensor] : changedByTraining(*stage.executor))
        own[name] = tensor.detach();
      for (const auto& entry : shapes)
        if (!own.count(entry.first))
          return Error(ErrorCode::InvalidGraph) << "stage '" << stage.name << "': no trained tensor '" << entry.first << "'";
    }
    if (s.comm->rank() != 0) {
      std::uint32_t t = first;
      if (s.own(i))
        for (const auto& entry : shapes)
          CLEAVE_CHECK(s.comm->send(own.at(entry.first), 0, t++));
      continue;
    }
    std::vector<std::pair<std::string, at::Tensor>> trained;
    std::uint32_t t = first;
    for (const auto& entry : shapes) {
      if (s.own(i)) {
        trained.emplace_back(entry.first, own.at(entry.first));
        continue;
      }
      CLEAVE_TRY(at::Tensor tensor, s.comm->recv(stage.rank, t++));
      trained.emplace_back(entry.first, tensor);
    }
    CLEAVE_TRY(ir::Graph graph, withTrainedParameters(*stage.graph, trained));
    CLEAVE_CHECK(io::writeOnnx(graph, (std::filesystem::path(outDir) / stage.file).string()));
    for (auto& entry : trained) // a tied parameter's copies are equal: the first stage's is kept
      if (gatheredNames.insert(entry.first).second)
        gathered.push_back(std::move(entry));
  }
  CLEAVE_CHECK(s.comm->finish());
  if (s.comm->rank() != 0)
    return {};
  if (whole) {
    CLEAVE_TRY(ir::Graph graph, withTrainedParameters(*whole, gathered));
    CLEAVE_CHECK(io::writeOnnx(graph, (std::filesystem::path(outDir) / "trained.onnx").string()));
  }
  CLEAVE_TRY(std::string planText, readFile((std::filesystem::path(planDir) / "plan.json").string()));
  return writeFileAtomically((std::filesystem::path(outDir) / "plan.json").string(), planText);
}

RankTrainingState PipelineTrainer::trainingState() {
  RankTrainingState state{state_->optimized, state_->optimizer.get()};
  for (const Stage& stage : state_->stages)
    if (stage.executor)
      for (auto& [name, tensor] : stage.executor->updatedStatistics())
        state.parameters.emplace_back(stage.name + "/" + name, tensor);
  return state;
}

std::size_t PipelineTrainer::stages() const { return state_->stages.size(); }

const plan::PlanFile& PipelineTrainer::planFile() const { return state_->plan->file(); }

const std::string& PipelineTrainer::stageName(std::size_t stage) const { return state_->stages[stage].name; }

std::vector<const ir::Graph*> PipelineTrainer::stageGraphs() const {
  std::vector<const ir::Graph*> graphs;
  for (const Stage& stage : state_->stages)
    graphs.push_back(stage.graph.get());
  return graphs;
}

const std::vector<std::string>& PipelineTrainer::graphInputs() const { return state_->plan->graphInputs(); }

std::vector<std::string> PipelineTrainer::ownStages() const {
  std::vector<std::string> names;
  for (int i = 0; i < static_cast<int>(state_->stages.size()); ++i)
    if (state_->own(i))
      names.push_back(state_->stages[i].name);
  return names;
}

Expected<StepResult> PipelineTrainer::step(const TrainingData& data, std::int64_t stepIndex,
                                       const pipeline::Schedule* schedule) {
  State& s = *state_;
  if (!s.comm)
    return Error(ErrorCode::InvalidArgument) << "the trainer is not connected";
  auto started = std::chrono::steady_clock::now();
  const std::size_t headersBefore = s.comm->headersSent();
  const double transportBefore = s.comm->transportCpuSeconds();
  CLEAVE_TRY(TensorMap batch, s.replicaRows(data, stepIndex));
  CLEAVE_TRY(std::vector<TensorMap> chunks, splitMicrobatches(batch, s.options.microbatches));
  s.stepIndex = stepIndex;
  if (schedule && schedule->microbatches != chunks.size())
    return Error(ErrorCode::InvalidArgument) << "the schedule is for " << schedule->microbatches << " microbatches; "
                                             << s.options.batch / s.replicaCount << " rows make " << chunks.size();
  s.resetTiming(chunks.size());
  const std::vector<double> shares = s.startMicrobatches(chunks);
  clearGradients(*s.optimizer);
  resetHostMemoryPeak();
  const std::int64_t bytesAtStart = hostMemoryStats().bytesInUse;
  s.stepPeakBytes = bytesAtStart;
  std::vector<std::map<int, StageRun>> runs(chunks.size());
  double lossSum = 0.0;
  const std::vector<pipeline::Action> actions =
      pipeline::rankComputeActions(schedule, static_cast<std::uint32_t>(s.stages.size()), static_cast<std::uint32_t>(chunks.size()),
                                   static_cast<std::uint32_t>(s.worldSize), static_cast<std::uint32_t>(s.rank), true);
  CLEAVE_TRY(ReceiveOrder* receives, s.restartReceives(schedule, chunks.size(), actions, true));
  const ReceiveOrder::Post post = [&](int peer, std::uint32_t tag, std::uint64_t key) {
    return s.comm->postRecv(peer, tag, key);
  };
  const std::vector<std::vector<int>> gradientsDone =
      s.replicas ? s.gradientsDoneAfter(actions) : std::vector<std::vector<int>>(actions.size());
  for (std::size_t k = 0; k < actions.size(); ++k) {
    CLEAVE_CHECK(receives->postThrough(k + kReceiveLookahead, post));
    CLEAVE_CHECK(s.runAction(actions[k], chunks, shares, runs, lossSum, started));
    for (int done : gradientsDone[k])
      CLEAVE_CHECK(s.startReplicaSum(done));
  }
  CLEAVE_CHECK(s.comm->finish());
  s.timing.scheduleSeconds = secondsSince(started);
  CLEAVE_CHECK(s.finishReplicaSums());
  s.timing.rankScheduleSeconds[static_cast<std::size_t>(s.rank)] = s.timing.scheduleSeconds;
  s.timing.rankTransportSeconds[static_cast<std::size_t>(s.rank)] = s.comm->transportCpuSeconds() - transportBefore;
  s.timing.headersSent = static_cast<double>(s.comm->headersSent() - headersBefore);
  runs.clear(); // the step's activations, freed before the optimizer allocates its state
  s.timing.rankPeakStepBytes[static_cast<std::size_t>(s.rank)] =
      static_cast<double>(std::max(s.stepPeakBytes, hostMemoryStats().peakBytesInUse) - bytesAtStart);
  CLEAVE_CHECK(s.reduceTiedGradients());
  // Every rank learns the loss and the gradients' norm before any updates, so all skip or stop
  // at the same step (finishStep).
  StepResult result;
  CLEAVE_TRY(const double gradNorm, s.reduceLossAndGradientNorm(lossSum, result.loss));
  CLEAVE_CHECK(finishStep(*s.optimizer, s.options, stepIndex, gradNorm, result));
  s.timing.stepSeconds = secondsSince(started);
  return result;
}

Expected<double> PipelineTrainer::evaluate(const TrainingData& data, std::int64_t batches) {
  State& s = *state_;
  if (!s.comm)
    return Error(ErrorCode::InvalidArgument) << "the trainer is not connected";
  c10::NoGradGuard noGrad;
  ForwardEvaluation evaluation;
  const ReceiveOrder::Post post = [&](int peer, std::uint32_t tag, std::uint64_t key) {
    return s.comm->postRecv(peer, tag, key);
  };
  double lossSum = 0.0;
  for (std::int64_t b = 0; b < batches; ++b) {
    CLEAVE_TRY(TensorMap batch, s.replicaRows(data, b));
    CLEAVE_TRY(std::vector<TensorMap> chunks, splitMicrobatches(batch, s.options.microbatches));
    const std::vector<double> shares = s.startMicrobatches(chunks);
    const std::vector<pipeline::Action> actions = pipeline::rankComputeActions(
        nullptr, static_cast<std::uint32_t>(s.stages.size()), static_cast<std::uint32_t>(chunks.size()),
        static_cast<std::uint32_t>(s.worldSize), static_cast<std::uint32_t>(s.rank), false);
    CLEAVE_TRY(ReceiveOrder* receives, s.restartReceives(nullptr, chunks.size(), actions, false));
    std::vector<std::map<int, StageRun>> runs(chunks.size());
    for (std::size_t k = 0; k < actions.size(); ++k) {
      CLEAVE_CHECK(receives->postThrough(k + kReceiveLookahead, post));
      const pipeline::Action& action = actions[k];
      if (action.type == pipeline::ActionType::Forward)
        CLEAVE_CHECK(s.forwardStage(action.microbatch, static_cast<int>(action.stage), chunks[action.microbatch], runs,
                                    lossSum, shares[action.microbatch]));
    }
    CLEAVE_CHECK(s.comm->finish());
  }
  at::Tensor total = at::full({1}, lossSum, at::kDouble); // the loss stage's rank of each replica holds it
  CLEAVE_CHECK(s.comm->allReduceSum(total));
  if (s.replicas)
    CLEAVE_CHECK(s.replicas->allReduceSum(total));
  return total.item<double>() / static_cast<double>(batches);
}

Status PipelineTrainer::gatherStepTiming(StepTiming& timing) const {
  const StepTiming& own = state_->timing; // other ranks' slots are zeros here: a sum gathers them
  const std::vector<double> headers{own.headersSent};
  const std::vector<double>* parts[] = {&own.forwardSeconds,      &own.backwardSeconds, &own.weightSeconds,
                                        &own.rankScheduleSeconds, &own.rankWaitSeconds, &own.rankReceives,
                                        &own.rankTransportSeconds, &headers,              &own.actionSeconds,
                                        &own.rankPeakStepBytes,   &own.rankReplicaWaitSeconds,
                                        &own.stageForwardBytes,   &own.stageBackwardBytes,  &own.stageGradientBytes};
  std::vector<std::int64_t> offsets{0};
  for (const std::vector<double>* part : parts)
    offsets.push_back(offsets.back() + static_cast<std::int64_t>(part->size()));
  at::Tensor all = at::zeros({offsets.back()}, at::kDouble);
  double* c = all.data_ptr<double>();
  for (std::size_t p = 0; p < std::size(parts); ++p)
    std::copy(parts[p]->begin(), parts[p]->end(), c + offsets[p]);
  CLEAVE_CHECK(state_->comm->allReduceSum(all));
  timing.stepSeconds = own.stepSeconds;
  timing.scheduleSeconds = own.scheduleSeconds;
  std::vector<double> headersSent;
  std::vector<double>* into[] = {&timing.forwardSeconds,      &timing.backwardSeconds, &timing.weightSeconds,
                                 &timing.rankScheduleSeconds, &timing.rankWaitSeconds, &timing.rankReceives,
                                 &timing.rankTransportSeconds, &headersSent,           &timing.actionSeconds,
                                 &timing.rankPeakStepBytes,   &timing.rankReplicaWaitSeconds,
                                 &timing.stageForwardBytes,   &timing.stageBackwardBytes,  &timing.stageGradientBytes};
  for (std::size_t p = 0; p < std::size(parts); ++p)
    into[p]->assign(c + offsets[p], c + offsets[p + 1]);
  timing.headersSent = headersSent[0];
  return {};
}

} // namespace cleave::runtime::distributed
