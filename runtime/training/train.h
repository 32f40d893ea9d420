// runtime/training/train.h - training a model whose outputs include its loss (exported with its loss, like
// the seeds' LossWrapper: targets are ordinary inputs), in one process, on ATen autograd and
// libtorch's own optimizers (torch::optim::SGD, AdamW: PyTorch's update rules exactly).
//
// A step takes the next `batch` rows of the data (training_data.h), splits them into
// microbatches (runtime/model/microbatch.h: the last may be smaller), and for each runs the forward
// pass and backpropagates its loss scaled by its share of the batch's rows, so the accumulated
// gradients are those of the full batch's mean loss even when microbatches are uneven; then one
// optimizer step. Trained are the floating parameters that are not buffers, one tensor per
// storage (an ONNX alias of a parameter is that parameter).
// Guarantees: the losses and weights follow PyTorch's training of the same model on the same
// rows (tests/train_test.py, within float rounding); `trainedGraph` is the model with the
// trained values (inline), writable as ONNX.
// Complexity: per step, one forward and one backward per microbatch, plus the optimizer's O(P).
#pragma once

#include <memory>
#include <string>

#include <torch/optim/optimizer.h>

#include "base/enum_table.h"
#include "base/expected.h"
#include "ir/graph.h"
#include "pipeline/schedule_sim.h"
#include "runtime/engine/forward_replay.h"
#include "runtime/engine/tensors.h"
#include "runtime/engine/torch_compat.h"
#include "runtime/model/backend.h"
#include "runtime/training/checkpoint.h"
#include "runtime/training/lr_schedule.h"
#include "runtime/training/step_record.h"
#include "runtime/training/training_data.h"

namespace cleave::runtime {

enum class OptimizerKind : std::uint8_t { Sgd, AdamW };
inline constexpr auto kOptimizerKinds = enumTable<OptimizerKind>({{OptimizerKind::Sgd, "sgd"}, {OptimizerKind::AdamW, "adamw"}});

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::Sgd;
  double lr = 0.01, momentum = 0.0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  std::optional<double> weightDecay; // default: PyTorch's (SGD 0, AdamW 0.01)
};

// The forward's precision. bf16 is PyTorch's mixed precision, torch.autocast(dtype=bfloat16):
// the forward runs under autocast (matrix products and convolutions in bf16, precision-sensitive
// ops in float32, by the same dispatcher lists torch uses), while parameters, gradients and the
// optimizer stay float32 (master weights); the backward follows the forward's casts.
// (Precision is runtime/engine/optimizations.h's; training takes no fp16, which wants loss scaling.)
inline constexpr auto kTrainingPrecisions =
    enumTable<Precision>({{Precision::Fp32, "fp32"}, {Precision::Bf16, "bf16"}});

// Activation recomputation (PyTorch's activation checkpointing). `Stage` (plans) runs a stage's
// forward, keeping only its inputs (and the generator's state), and runs it again just before
// the stage's backward of that microbatch: the activations inside a stage are held for one
// microbatch at a time, not for every microbatch in flight, at the cost of a second forward.
// `Selective` (plans and whole models) keeps what linear and convolution layers make and
// recomputes, in the backward, the runs of ops between them that hold a product of two
// activations (attention's scores, their scaling and softmax: recompute.h), as Megatron-LM's
// selective recomputation does; a model without such a product holds what `None` holds.
// Gradients are unchanged, bit for bit, under both. (The one enum and its names are
// pipeline/schedule_sim.h's, whose simulator models all three.)
using Recompute = pipeline::Recompute;
using pipeline::kRecomputeKinds;

// What a step does when its loss or its gradients' norm is not finite (NaN or infinite). Stop
// (the default) fails that step before the optimizer changes anything: the run ends there, and
// nothing is written over the last checkpoint or the output. Skip drops the step's gradients and
// leaves every parameter and the optimizer's state as they were, as torch.amp's GradScaler skips
// a step whose gradients hold inf or NaN; the learning-rate schedule advances all the same.
enum class NonFinitePolicy : std::uint8_t { Stop, Skip };

struct TrainOptions {
  std::int64_t batch = 1, microbatches = 1;
  std::string loss; // the output that is the loss; empty: the output named "loss", else the only scalar one
  OptimizerOptions optimizer;
  LrSchedule lrSchedule;              // each step's multiplier of optimizer.lr
  std::optional<double> clipGradNorm; // clip the gradients' global L2 norm to this
  Precision precision = Precision::Fp32;
  Recompute recompute = Recompute::None; // Stage: plans only
  std::uint64_t seed = 0; // --seed: dropout's draws (seedForward)
  NonFinitePolicy nonFinite = NonFinitePolicy::Stop;
};

// Enters the forward's precision for `options` on `device` (autocast for bf16; nothing for fp32)
// until `scope` is reset or destroyed.
void enterForwardPrecision(std::optional<AutocastScope>& scope, const TrainOptions& options, c10::DeviceType device);

// After a step's backward, with its loss and its gradients' global norm (every rank holding the
// same two): false when both are finite; true when Skip is to drop the step; InvalidArgument,
// one line naming step `stepIndex` (counted from 0, named from 1) and what is not finite, under
// Stop. O(1).
Expected<bool> skipNonFiniteStep(const TrainOptions& options, std::int64_t stepIndex, double loss, double gradNorm);

// Seeds the generators a forward draws from (forward_replay.h) for one forward: stage `stage` of microbatch `microbatch` of
// step `step` draws the same dropout masks whichever rank runs it, however many ranks there are,
// and after a resume. Data-parallel replicas draw alike on their own rows (as DDP's ranks do when
// seeded alike), so their ranks' states, and checkpoints, stay equal. O(1).
void seedForward(std::uint64_t seed, std::int64_t stage, std::int64_t step, std::int64_t microbatch);

// libtorch's optimizer for `options` over `params` (PyTorch's defaults where options are unset).
std::unique_ptr<torch::optim::Optimizer> makeOptimizer(std::vector<at::Tensor> params, const OptimizerOptions& options);
// Starts a step's gradient accumulation by dropping every parameter's gradient rather than
// zeroing it: the first microbatch's backward then takes its gradient over (no memset of every
// gradient, no add to zeros). The sums are the same, bit for bit (0 + g == g).
void clearGradients(torch::optim::Optimizer& optimizer);
// The optimizer's step over the accumulated gradients. A parameter no backward reached gets a
// zero gradient first, so weight decay and moments treat it as after zero_grad().
void stepOptimizer(torch::optim::Optimizer& optimizer);
// The sum over `params` of their gradients' squared L2 norms: each norm as ATen computes it in
// the gradient's dtype (as clip_grad_norm_ does), squared and summed in double. A parameter
// without a gradient adds 0. O(elements).
double squaredGradientNorm(const std::vector<at::Tensor>& params);
// The step's update once every gradient is complete: with options.clipGradNorm, every gradient
// times torch.nn.utils.clip_grad_norm_'s coefficient min(1, max / (gradNorm + 1e-6)) for the
// global norm `gradNorm`; then the schedule's rate for `stepIndex`, and stepOptimizer. Returns
// that rate.
double updateParameters(torch::optim::Optimizer& optimizer, const TrainOptions& options, std::int64_t stepIndex,
                        double gradNorm);
// The step's end once its loss and gradient norm are known: fails or skips a non-finite step as
// options.nonFinite says (skipping drops the gradients and fills result.lr, result.skipped),
// else updateParameters. result.gradNorm is set under options.clipGradNorm alone.
Status finishStep(torch::optim::Optimizer& optimizer, const TrainOptions& options, std::int64_t stepIndex,
                  double gradNorm, StepResult& result);

// What training changes in `executor` (trainable): its trained tensors, then the running
// statistics its forwards update (running_statistics.h), by name: what checkpoints and trained
// models hold.
std::vector<std::pair<std::string, at::Tensor>> changedByTraining(const Executor& executor);

// `graph` with its trainable parameters' data replaced by `trained` (by name; others unchanged).
Expected<ir::Graph> withTrainedParameters(const ir::Graph& graph,
                                          const std::vector<std::pair<std::string, at::Tensor>>& trained);

class Trainer {
public:
  // Lowers the graph as a trainable executor on `backend` (Backend::lowerTrainable). Fails: what
  // that fails with, InvalidArgument (no loss output, no floating parameters).
  static Expected<std::unique_ptr<Trainer>> create(std::shared_ptr<const ir::Graph> graph, const TrainOptions& options,
                                                   const Backend& backend);
  ~Trainer();

  // One step on rows stepIndex * batch onward of `data` (training_data.h).
  Expected<StepResult> step(const TrainingData& data, std::int64_t stepIndex);
  // The held-out loss: the mean loss over rows [0, batches x batch) of `data`, in batches of
  // --batch rows and their microbatches, each forward as torch's model.eval() under no_grad runs
  // it (forward_replay.h's ForwardEvaluation): nothing trains, no running statistic changes.
  Expected<double> evaluate(const TrainingData& data, std::int64_t batches);
  Expected<ir::Graph> trainedGraph() const;
  // Its trained tensors and optimizer, to checkpoint or restore (runtime/training/checkpoint.h).
  RankTrainingState trainingState();

private:
  Trainer() = default;
  struct State;
  std::unique_ptr<State> state_;
};

} // namespace cleave::runtime
