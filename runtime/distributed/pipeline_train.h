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
#include "runtime/training/step_record.h"
#include "runtime/training/train.h"

namespace cleave::runtime::distributed {

using runtime::StepTiming;

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
  int stageRank(std::size_t stage) const; // the pipeline rank holding it
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
