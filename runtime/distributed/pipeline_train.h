// runtime/distributed/pipeline_train.h - training a cut model's stages (a plan.json directory whose
// outputs include the loss) across ranks on c10d, or in one process with Communicator::local().
//
// Stage i lives on rank i % ranks (loop placement: pipeline::stageRank), or in a V (the zbv and
// dualpipev schedules: with 2R stages rank r holds stages r and 2R - 1 - r). Several replicas of the
// pipeline may train side by side on shares of the batch (data x pipeline parallel: connect()). A step takes the next `batch` rows of the data,
// splits them into microbatches, and runs GPipe: every microbatch forward through the stages in
// plan order, then every microbatch backward through them in reverse. Each stage runs on its own
// trainable executor (ATen autograd); a value entering a stage is an autograd leaf there, so each
// stage backpropagates alone: its output gradients are the sum over the stages that read the
// value (received from other ranks, or read from the local leaf), plus the loss's share of the
// batch's rows for the loss. A parameter held by several stages (pipeline's multi_use replicate)
// gets the sum of their gradients on every holder (an all-reduce), so the copies stay equal. Then
// one libtorch optimizer step per rank (runtime/training/train.h's options).
// Guarantees: no deadlock (every rank walks the same (phase, microbatch, stage) order; sends never
// wait; a receive waits only for what an earlier step of that order sent); the loss reported on
// every rank is the batch's mean loss; losses follow the whole model's `cleave train` within float
// rounding (tests/distributed_test.py).
// Complexity: per step, each stage's forward and backward per microbatch, one message per (value,
// reading stage) each way (shapes declared from the plan: no header, except the first message of
// a key whose plan shape is open; communicator.h's shape keys), one all-reduce per tied
// parameter and one for the loss. Tied copies
// start equal: the first holder's value is broadcast (an all-reduce) at connect.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/expected.h"
#include "runtime/distributed/communicator.h"
#include "runtime/model/backend.h"
#include "pipeline/schedule.h"
#include "plan/plan_file.h"
#include "runtime/training/train.h"

namespace cleave::runtime::distributed {

// Where a step's time went: its wall time on this rank (from reading its rows to the loss's
// all-reduce), the part of it until the schedule's last action and its sends were done (before
// tied gradients' all-reduce and the optimizer step), and, per stage, the seconds its forwards
// and its backwards computed (summed over microbatches; waiting for a receive is not counted).
// A backward split into I and W (zero bubble) counts both; weightSeconds is W's part. Per rank:
// its schedule's wall seconds and the part of them it waited in receives (the rest is compute
// and the work between actions: gradient sums, sends, freeing activations), the messages it
// received, and the CPU seconds its transport's own threads ran meanwhile (communicator.h: not
// in the rank's wall time, but taken from the same cores).
struct StepTiming {
  double stepSeconds = 0.0, scheduleSeconds = 0.0;
  std::vector<double> forwardSeconds, backwardSeconds, weightSeconds; // per stage
  std::vector<double> rankScheduleSeconds, rankWaitSeconds;           // per rank
  std::vector<double> rankReceives, rankTransportSeconds;             // per rank
  // Per rank: the most bytes ATen's CPU allocator held during the step above what it held at
  // the step's start (activations, autograd's buffers, gradients, messages: what --recompute
  // shrinks), from runtime/engine/host_memory.h's counters; 0 where its allocator is not installed.
  std::vector<double> rankPeakStepBytes;
  // Per stage, the most over its microbatches, from the same counters (0 without them): what one
  // forward left allocated (held until its backward: activations and autograd's saved tensors, or
  // under --recompute stage its inputs; with what it received, allocated when the receive was
  // posted, before it began), how far a backward (B, I or W) rose above what was allocated when it began (its
  // recomputation and autograd's temporaries), and the parameters' gradients its first B (or W)
  // made, which stay to the step's end (not in that rise). The inputs of `cleave schedule
  // --simulate`'s memory model.
  std::vector<double> stageForwardBytes, stageBackwardBytes, stageGradientBytes;
  // Per rank, data parallel: the seconds it waited after its schedule for the sums of its stages'
  // gradients across the replicas (started as each stage's backward ended: the part the
  // schedule's remaining work did not hide).
  std::vector<double> rankReplicaWaitSeconds;
  double headersSent = 0.0; // shape headers sent in the step (communicator.h; gathered: all ranks')
  // The measured timeline: per (stage, microbatch, action type F / B / I / W), at
  // actionSlot(...) * kSlotFields: start, end and the receive wait inside it, in seconds from the
  // step's start on the rank that ran it, that rank, and the compute seconds inside it (what the
  // stage's forward / backward seconds gained; the rest of end - start - wait is the
  // action's bookkeeping); zeros for an action not run. Comparable with the simulator's.
  std::vector<double> actionSeconds;
  static constexpr std::size_t kSlotFields = 5;   // start, end, wait, rank, compute
  static constexpr std::size_t kComputeTypes = 4; // F, B, I, W: ActionType's first four
  // A stage's compute seconds so far: forward plus backward (which includes W's).
  double computeSeconds(std::size_t stage) const { return forwardSeconds[stage] + backwardSeconds[stage]; }
  static std::size_t actionSlot(std::size_t stage, std::size_t microbatch, std::size_t microbatches,
                                pipeline::ActionType type) {
    return (stage * microbatches + microbatch) * kComputeTypes + static_cast<std::size_t>(type);
  }
};

class PipelineTrainer {
public:
  // Loads the plan (runtime/model/loaded_plan.h: stage s on rank stageRank(s, worldSize,
  // placement), the placement of the schedule the steps will follow) and lowers this
  // rank's stages as trainable executors on `backend`, or on the backend a stage's device names
  // (runtime/model/plan_backends.h); no communication, so every check of the user's input can come
  // before connecting. Fails: what LoadedPlan::load and Backend::lowerTrainable fail with.
  static Expected<std::unique_ptr<PipelineTrainer>> create(const std::string& planDir, const TrainOptions& options,
                                                          int rank, int worldSize, const Backend& backend,
                                                          pipeline::Placement placement = pipeline::Placement::Loop);
  // Collective: joins the ranks on `comm` (its rank and size as create's) and makes tied copies
  // equal. Before the first step. Data parallel: `replicas` joins this pipeline rank's ranks in
  // every replica of the pipeline (this replica is its rank); each step then trains on the
  // replica's share of the batch's rows (--batch split in equal parts, each microbatch's loss
  // scaled by its share of the whole batch), and every stage's gradients are summed across the
  // replicas (runtime/distributed/replica_gradients.h) as soon as its last backward is done, while
  // the schedule goes on; the replicas' parameters stay equal. Fails: the batch does not split
  // into equal shares.
  Status connect(Communicator& comm, Communicator* replicas = nullptr);
  // Whether `data` fits the plan's inputs: dtype, rank and every static dim but the rows.
  Status checkData(const TensorMap& data) const;
  ~PipelineTrainer();
  // One step; every rank returns the batch's mean loss, the rate and (clipping) the global
  // gradient norm. `schedule` (stages and microbatches as
  // the plan's and the options'; its placement create's) orders this rank's F and B / I
  // actions (I gives the inputs' gradients, W later the parameters': runtime/training/split_backward.h); none: GPipe.
  Expected<StepResult> step(const TrainingData& data, std::int64_t stepIndex,
                            const pipeline::Schedule* schedule = nullptr);
  // Collective: the held-out loss, every rank returning it: the mean loss over rows
  // [0, batches x batch) of `data` (each replica its share), each batch's microbatches run forward
  // in GPipe order as torch's model.eval() under no_grad runs them (Trainer::evaluate).
  Expected<double> evaluate(const TrainingData& data, std::int64_t batches);
  // Whether `whole` is the model the plan was cut from, as far as training goes: it trains the
  // same parameters (names, dtypes, shapes) as the plan's stages together. Fails naming the first
  // that differs. O(parameters x log).
  Status checkWholeModel(const ir::Graph& whole) const;
  // Collective (every rank calls it): rank 0 gathers each stage's trained parameters and writes
  // `outDir` as a plan directory like `planDir` (its plan.json, each stage's model with them), and
  // with `whole` (checked by checkWholeModel) also trained.onnx: the whole model with them.
  Status writeTrained(const std::string& planDir, const std::string& outDir, const ir::Graph* whole = nullptr);
  // Collective: every stage's compute seconds of the last step (summed across ranks), with this
  // rank's step wall time.
  Status gatherStepTiming(StepTiming& timing) const;
  std::size_t stages() const;
  const std::string& stageName(std::size_t stage) const;
  // Every stage's graph (all ranks hold them all), in stage order.
  std::vector<const ir::Graph*> stageGraphs() const;
  // The plan as read (its plan.json), once.
  const plan::PlanFile& planFile() const;
  // The plan's graph inputs (what the data must hold).
  const std::vector<std::string>& graphInputs() const;
  std::vector<std::string> ownStages() const;
  // This rank's trained tensors ("STAGE/NAME", in its optimizer's order) and optimizer, to
  // checkpoint or restore (runtime/training/checkpoint.h).
  RankTrainingState trainingState();

private:
  PipelineTrainer() = default;
  struct State;
  std::unique_ptr<State> state_;
};

} // namespace cleave::runtime::distributed
