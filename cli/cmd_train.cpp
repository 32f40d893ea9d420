// cli/cmd_train.cpp - `cleave train MODEL --data FILE --batch B --steps K [--microbatches M]
// [--optimizer sgd|adamw --lr X --momentum --weight-decay --betas B1,B2] [--backend NAME] [--loss NAME]
// [--lr-schedule constant|linear|cosine --warmup N] [--clip-grad-norm X] [-o OUT] [--json]`.
#include <ATen/Context.h>

#include <algorithm>
#include <chrono>
#include <tuple>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "base/file_io.h"
#include "cli/commands.h"
#include "cli/runtime_library.h"
#include "cli/options.h"
#include "io/model_loader.h"
#include "io/onnx.h"
#include "pipeline/schedule.h"
#include "cli/planning_model.h"
#include "cli/runtime_options.h"
#include "plan/fixed_batch_check.h"
#include "plan/plan_file.h"
#include "runtime/distributed/checkpoint_schedule.h"
#include "runtime/distributed/communicator.h"
#include "runtime/distributed/pipeline_train.h"
#include "runtime/distributed/rank_layout.h"
#include "runtime/engine/host_memory.h"
#include "runtime/engine/kernel.h"
#include "runtime/model/microbatch.h"
#include "runtime/model/tensor_files.h"
#include "runtime/model/wing_library.h"
#include "runtime/training/throughput.h"
#include "runtime/training/train.h"
#include "runtime/training/trainable_set.h"
#include "runtime/training/training_data.h"

namespace cleave::cli {
namespace {
struct TrainFlags {
  std::string path, dataPath, wholeModelPath;
  std::string backend = "aten-cpu";
  std::string transport = "auto"; // how ranks talk: auto, gloo or nccl (runtime/distributed/transport.h)
  std::int64_t steps = 1;
  std::vector<double> betas;
  runtime::TrainOptions options;
  std::optional<pipeline::ScheduleKind> schedule;
  OutputDirectoryFlags output;
  bool json = false, timing = false, skipNonFinite = false;
  io::FixedPatterns fixedPatterns; // --frozen / --trainable (a model; a plan records its own)
  // Checkpoints: where, how often, where from, and where to stop.
  runtime::distributed::CheckpointSchedule checkpoints;
  std::uint64_t seed = 0;
  std::optional<int> pipelineRanks; // data x pipeline parallel: ranks per replica (default: all)
  // Token data (runtime/training/training_data.h): --tokens names the ids' format.
  std::string tokens, sampling = "random";
  std::vector<std::string> tokenInputs;
  std::optional<std::int64_t> seqLen;
  // Held-out loss, the JSONL log and how often a step prints.
  std::string evalDataPath, logPath;
  std::int64_t evalEvery = 0, evalBatches = 4;
  std::optional<std::int64_t> printEvery;

  std::optional<runtime::TokenDataOptions> tokenOptions() const {
    if (tokens.empty())
      return std::nullopt;
    return runtime::TokenDataOptions{*runtime::kTokenFormats.parse(tokens), *runtime::kSamplings.parse(sampling), seed,
                                     tokenInputs, seqLen};
  }
  // --print-every; else every step under --json or up to 100 steps; beyond, about 50 lines a run.
  std::int64_t printInterval() const { return printEvery.value_or(json || steps <= 100 ? 1 : (steps + 49) / 50); }
};

// Token streams, held-out loss, logs and progress.
void describeData(CLI::App& app, TrainFlags& flags) {
  app.add_option("--tokens", flags.tokens,
                 "--data (and --eval-data) is a token stream, memory-mapped and never read whole: uint16 or uint32, a "
                 "flat binary of ids (nanoGPT's train.bin); npy, a folder of 1-D integer .npy shards in name order, "
                 "one stream. A row is a window of --seq-len ids; the token input gets it, the target input the same "
                 "window shifted by one (docs/distributed.md, \"How data is read\")")
      ->check(CLI::IsMember(runtime::kTokenFormats.names()));
  app.add_option("--token-inputs", flags.tokenInputs,
                 "with --tokens: INPUT[,TARGET], the model inputs that take the window and its shifted copy (default: "
                 "the model's one or two integer inputs, in input order)")
      ->delimiter(',');
  app.add_option("--seq-len", flags.seqLen, "with --tokens: ids per row (default: the token input's static dim 1)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--sampling", flags.sampling,
                 "with --tokens: random, a window at a random offset per row (nanoGPT's get_batch), or epochs, every "
                 "window of the stream once per epoch in an order shuffled by --seed; a row's window depends on its "
                 "number and --seed alone, so ranks, replicas (disjoint shares) and resumed runs agree")
      ->check(CLI::IsMember(runtime::kSamplings.names()))
      ->capture_default_str();
  app.add_option("--eval-data", flags.evalDataPath,
                 "held-out data (the format of --data): its loss over --eval-batches batches of --batch rows, run as "
                 "torch's model.eval() under no_grad (dropout off, BatchNorm's statistics untouched), every "
                 "--eval-every steps and after the last");
  app.add_option("--eval-every", flags.evalEvery, "steps between held-out losses (default: only after the last)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--eval-batches", flags.evalBatches, "batches of --batch rows the held-out loss averages (the same rows each time)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  app.add_option("--log", flags.logPath,
                 "write every step's JSON line (as --json prints it, with rows/s, tokens/s, FLOP/s, the held-out loss "
                 "and, for token data, each row's window start and the held-out rows', so a reference can read the same rows) to this file, "
                 "one per line, flushed as it goes");
  app.add_option("--print-every", flags.printEvery,
                 "print every N-th step; default every step under --json or up to 100 steps, beyond that about 50 lines a run (the "
                 "first, the last and held-out losses always print). Printing every N > 1 (or with --timing), a line "
                 "also gives rows/s (tokens/s), FLOP/s and the time left; else lines repeat byte for byte")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
}

// Checkpoints, resuming and stopping (runtime/training/checkpoint.h).
void describeCheckpoints(CLI::App& app, TrainFlags& flags) {
  app.add_option("--checkpoint-dir", flags.checkpoints.checkpointDir,
                 "write checkpoints into this folder (every rank must see it): each rank's parameters, optimizer "
                 "state, RNG state and the step, whole on every rank or not at all; at the run's end, at "
                 "--stop-after, and every --checkpoint-every steps; only the last complete one is kept. Under "
                 "`cleave launch --max-restarts`, a restarted run resumes from it");
  app.add_option("--checkpoint-every", flags.checkpoints.every, "steps between checkpoints (needs --checkpoint-dir)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--resume", flags.checkpoints.resumeDir,
                 "continue from the last complete checkpoint in this folder, exactly as the run that wrote it would "
                 "have gone on (a checkpoint of another model, plan, rank count, --batch, --optimizer or schedule "
                 "is refused, naming what differs); checkpoints go on into it unless --checkpoint-dir says otherwise");
  app.add_option("--stop-after", flags.checkpoints.stopAfter,
                 "stop after this step of --steps, writing a checkpoint there (a job with a time limit: the next "
                 "one continues with --resume, the schedule still spanning --steps)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--seed", flags.seed,
                 "seeds the random generator every rank starts with (libtorch's own is seeded at random: a fixed "
                 "seed makes runs and their checkpoints repeat byte for byte); dropout draws from it, seeded anew "
                 "for each stage, step and microbatch, so its masks do not depend on the ranks")
      ->capture_default_str();
}

void describe(CLI::App& app, TrainFlags& flags) {
  app.description("Train a model exported with its loss (targets are inputs) on ATen autograd and PyTorch's own "
                  "optimizers: per step the next --batch rows of --data, in --microbatches (gradients accumulated, "
                  "each loss scaled by its share of the rows), then one optimizer step. A pipeline plan directory "
                  "trains its stages: in this process, or under `cleave launch` stage i on rank i % ranks. Prints "
                  "each step's loss; -o DIR gets trained.onnx (whole models) or, for a plan, a plan directory of the "
                  "trained stages (runs with `cleave run DIR`), plus trained.onnx when --model names the model the "
                  "plan was cut from.");
  app.add_option("MODEL", flags.path, "ONNX model exported with its loss, or a pipeline plan directory")->required();
  app.add_option("--data", flags.dataPath,
                 "training data: every model input, rows along dim 0 (.npz, .json, folder), or a token stream (--tokens)")
      ->required();
  app.add_option("--batch", flags.options.batch, "rows per step")->required()->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--steps", flags.steps, "optimizer steps")->capture_default_str()->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--microbatches", flags.options.microbatches, "microbatches per step")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  addEnumOption(app, "--optimizer", flags.options.optimizer.kind, runtime::kOptimizerKinds, "optimizer");
  app.add_option("--lr", flags.options.optimizer.lr, "learning rate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->check(kFinite);
  app.add_option("--momentum", flags.options.optimizer.momentum, "sgd momentum")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->check(kFinite);
  app.add_option("--weight-decay", flags.options.optimizer.weightDecay, "weight decay (default: PyTorch's, sgd 0, adamw 0.01)")
      ->check(CLI::NonNegativeNumber)
      ->check(kFinite);
  app.add_option("--betas", flags.betas, "adamw betas B1,B2 (default 0.9,0.999)")
      ->delimiter(',')
      ->expected(2)
      ->check(kFinite);
  addEnumOption(app, "--precision", flags.options.precision, runtime::kPrecisions,
                "the forward's precision: bf16 is torch.autocast(dtype=torch.bfloat16) (matrix products and "
                "convolutions in bf16, precision-sensitive ops in float32) with float32 master weights, gradients "
                "and optimizer");
  addEnumOption(app, "--recompute", flags.options.recompute, runtime::kRecomputeKinds,
                "stage (plan directories) runs each stage's forward without keeping its activations and runs it "
                "again before that microbatch's backward (only stage inputs are held across the schedule); "
                "selective keeps linear and convolution outputs and recomputes attention's scores and softmax "
                "in the backward (Megatron-LM's selective recomputation); gradients unchanged; --timing "
                "reports each rank's peak bytes");
  addEnumOption(app, "--lr-schedule", flags.options.lrSchedule.kind, runtime::kLrScheduleKinds,
                "the rate after warmup: constant at --lr, or linear or cosine decay from --lr to 0 at the last of --steps "
                "(PyTorch's LinearLR / CosineAnnealingLR)");
  app.add_option("--warmup", flags.options.lrSchedule.warmup,
                 "steps of linear warmup to --lr: step t < N trains at lr (t+1)/(N+1) (PyTorch's LinearLR)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 30));
  app.add_option("--clip-grad-norm", flags.options.clipGradNorm,
                 "clip the gradients' global L2 norm (all stages and ranks, a tied weight once) to X, as "
                 "torch.nn.utils.clip_grad_norm_; each step's norm before clipping is printed")
      ->check(CLI::PositiveNumber)
      ->check(kFinite);
  app.add_flag("--skip-nonfinite", flags.skipNonFinite,
               "skip a step whose loss or gradients' norm is NaN or infinite (its gradients dropped, parameters "
               "and optimizer state unchanged, as torch.amp's GradScaler skips), counting such steps; without it "
               "such a step stops the run with exit 1 before it changes any parameter, and nothing is written");
  app.add_option("--pipeline-ranks", flags.pipelineRanks,
                 "plan directories under launch: ranks per pipeline (default: every rank). With more ranks, they "
                 "hold replicas of the pipeline (data x pipeline parallel): rank r is pipeline rank r % N of "
                 "replica r / N, each replica trains on its equal share of --batch in --microbatches, and every "
                 "stage's gradients are summed across the replicas as soon as its backward is done")
      ->check(CLI::Range(1, 1 << 20));
  addScheduleOption(app, flags.schedule,
                    "plan directories under launch: the pipeline schedule each rank follows (default gpipe; in one "
                    "process stages run in GPipe order)");
  app.add_option("--backend", flags.backend,
                 "where to train: aten-cpu, or aten-cuda[:N] (GPU N; under launch, aten-cuda is GPU LOCAL_RANK) (a "
                 "plan's stages on a device whose devices-file entry names a backend train there)")
      ->capture_default_str();
  app.add_option("--transport", flags.transport,
                 "plan directories under launch: how the ranks talk. gloo (TCP, CPU tensors), nccl (GPU tensors; "
                 "a build with CUDA: a stream per channel, receives in each sender's order), or auto: nccl where "
                 "--backend aten-cuda and this build has it, else gloo")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}))
      ->capture_default_str();
  app.add_option("--loss", flags.options.loss, "the output that is the loss (default: 'loss', else the only scalar)");
  addTrainableFlags(app, flags.fixedPatterns);
  app.add_option("--model", flags.wholeModelPath,
                 "plan directories: the model the plan was cut from; -o DIR then gets its trained.onnx too");
  addOutputDirectory(app, flags.output, "directory for trained.onnx (a model) or the trained plan (a plan)");
  describeCheckpoints(app, flags);
  describeData(app, flags);
  app.add_flag("--json", flags.json,
               "print one JSON line per step: {\"step\": N, \"loss\": X, \"lr\": R} (and \"grad_norm\" when clipping; the first line also \"trainable\": what trains, what "
               "stays fixed and why, and how many running statistics it updates)");
  app.add_flag("--timing", flags.timing,
               "also print each step's wall seconds and, for a plan, the schedule's part of it, every stage's forward "
               "and backward compute seconds, the measured bubble (1 - compute / (ranks x schedule seconds)), each rank's "
               "messages received, its transport threads' CPU seconds, its wait for the replicas' gradient sums, each "
               "rank's peak step bytes and each stage's bytes a forward holds, a backward rises by and its gradients "
               "take (the inputs of cleave schedule --simulate's memory model) and, with --json, every action's start, "
               "end, receive wait and compute seconds per rank");
}

// What trains and what stays fixed, as JSON (the first step line's "trainable").
Json trainableJson(const runtime::TrainableSet& set) {
  Json fixed = Json::object();
  for (const auto& [why, count] : set.fixed)
    fixed[std::string(ir::kFixedReasons.name(why))] = count;
  return {{"trains", set.trains}, {"trained_bytes", set.trainedBytes}, {"fixed", std::move(fixed)},
          {"integer", set.integer}, {"updated", set.updated}, {"rule", set.defaultRule ? "default" : "listed"},
          {"shared", set.shared}, {"exporter_folds", set.exporterFolds},
          {"merged_split", set.mergesSplit}, {"possibly_constant", set.possiblyConstant}};
}

// "trains 9 tensors (1.2 MiB); holds 3 fixed: 2 folded, 1 buffer" (then how many running
// statistics its normalizations update) and, under the default rule,
// the line that says a buffer may be among those that train, and the one that says which tensors
// more than one module reads (tied, or merged by an eval-mode export).
void printTrainable(const runtime::TrainableSet& set, std::ostream& out) {
  std::int64_t held = set.integer;
  for (const auto& entry : set.fixed)
    held += entry.second;
  out << "trains " << set.trains << " tensor(s) (" << formatBytes(set.trainedBytes) << "); holds " << held << " fixed";
  const char* separator = ": ";
  for (const auto& [why, count] : set.fixed) {
    out << separator << count << " " << ir::kFixedReasons.name(why);
    separator = ", ";
  }
  if (set.integer)
    out << separator << set.integer << " integer";
  if (set.updated)
    out << "; updates " << set.updated << " running statistic(s) as torch's BatchNorm does";
  out << "\n";
  if (set.defaultRule)
    out << "the model lists no buffers: every floating initializer trains but Constants, running statistics and "
           "folded values, so a registered buffer exported as an initializer would train (tools/cleave_onnx.py "
           "lists a module's buffers in the model)\n";
  if (set.shared)
    out << set.shared << " trained tensor(s) are read by more than one module and train as one, their gradients "
        << "summed (e.g. " << set.sharedExample << ", read by " << set.sharedExampleScopes << " modules): a tied weight; "
        << "or, if those modules had their own, parameters of equal value that an eval-mode export merged "
        << "(export with training=torch.onnx.TrainingMode.TRAINING)\n";
  if (set.possiblyConstant)
    out << set.possiblyConstant << " trained tensor(s) hold a single number (e.g. " << set.possiblyConstantExample
        << "): an exporter's literal (a scale, an exponent) written as an initializer would train; hold such "
        << "tensors fixed with --frozen NAME, or list the module's buffers (tools/cleave_onnx.py)\n";
  if (set.exporterFolds)
    out << set.exporterFolds << " initializer(s) are values onnxscript's optimizer folded: those made of constants "
        << "and buffers stay fixed, one folded from a single parameter (a transposed weight) trains in its place; "
        << "export with torch.onnx.export(..., dynamo=True, optimize=False) to train exactly the module's parameters\n";
  if (set.mergesSplit)
    out << set.mergesSplit << " parameter(s) that the exporter's optimizer merged by value (fresh LayerNorm "
        << "weights, zero biases) train apart, each its own tensor as in the module\n";
}

// One step as printed and logged: what the step did, how fast, and the held-out loss after it.
struct StepLine {
  std::int64_t step = 0; // counted from 0
  runtime::StepResult result;
  runtime::StepRate rate;
  std::optional<double> evalLoss;
  Json timing; // null, or the step's measurements (--timing)
};

// The step's JSON line (--json, --log): `trainable` given with the first line printed; the rate
// where `withRate` (--log, --timing: a line that must repeat byte for byte leaves it out).
Json stepJson(const StepLine& line, const runtime::TrainableSet* trainable, bool withRate) {
  Json json{{"step", line.step + 1}, {"loss", line.result.loss}, {"lr", line.result.lr}};
  if (trainable)
    json["trainable"] = trainableJson(*trainable);
  if (line.result.gradNorm)
    json["grad_norm"] = *line.result.gradNorm;
  if (line.result.skipped)
    json["skipped"] = true;
  if (line.evalLoss)
    json["eval_loss"] = *line.evalLoss;
  if (withRate) {
    json["rows_per_s"] = line.rate.rowsPerSecond;
    if (line.rate.tokensPerSecond > 0.0)
      json["tokens_per_s"] = line.rate.tokensPerSecond;
    if (line.rate.flopsPerSecond)
      json["flops_per_s"] = *line.rate.flopsPerSecond;
  }
  if (!line.timing.is_null())
    json.update(line.timing);
  return json;
}

// "12 s", "3m05s", "2h07m": the time left.
std::string formatEta(double seconds) {
  const auto whole = static_cast<std::int64_t>(seconds + 0.5);
  char text[32];
  if (whole < 60)
    std::snprintf(text, sizeof text, "%llds", static_cast<long long>(whole));
  else if (whole < 3600)
    std::snprintf(text, sizeof text, "%lldm%02llds", static_cast<long long>(whole / 60), static_cast<long long>(whole % 60));
  else
    std::snprintf(text, sizeof text, "%lldh%02lldm", static_cast<long long>(whole / 3600),
                  static_cast<long long>(whole / 60 % 60));
  return text;
}

// "; 12.3 ktokens/s, 4.5 GFLOP/s, 3m05s left".
void printRate(const TrainFlags& flags, const StepLine& line, std::ostream& out) {
  out << "; " << (line.rate.tokensPerSecond > 0.0 ? formatSi(line.rate.tokensPerSecond, "tokens/s")
                                                   : formatSi(line.rate.rowsPerSecond, "rows/s"));
  if (line.rate.flopsPerSecond)
    out << ", " << formatSi(*line.rate.flopsPerSecond, "FLOP/s");
  if (flags.printInterval() > 1 && line.step + 1 < flags.steps)
    out << ", " << formatEta(line.rate.etaSeconds) << " left";
}

void printStep(const TrainFlags& flags, const StepLine& line, const runtime::TrainableSet* trainable, std::ostream& out) {
  const bool scheduled =
      flags.options.lrSchedule.kind != runtime::LrScheduleKind::Constant || flags.options.lrSchedule.warmup > 0;
  if (flags.json) {
    out << toJsonText(stepJson(line, trainable, flags.timing)) << "\n"; // one line per step
    out.flush();
    return;
  }
  if (trainable)
    printTrainable(*trainable, out);
  const runtime::StepResult& result = line.result;
  out << "step " << line.step + 1 << "/" << flags.steps << ": loss " << result.loss;
  if (scheduled)
    out << ", lr " << result.lr;
  if (result.gradNorm)
    out << ", grad norm " << *result.gradNorm;
  if (result.skipped)
    out << ", skipped (not finite)";
  if (line.evalLoss)
    out << ", held-out loss " << *line.evalLoss;
  if (flags.timing || flags.printInterval() > 1) // progress; else the lines repeat byte for byte
    printRate(flags, line, out);
  if (!line.timing.is_null())
    out << " (" << line.timing["seconds"].get<double>() * 1e3 << " ms"
        << (line.timing.contains("bubble") ? ", bubble " + std::to_string(line.timing["bubble"].get<double>()) : std::string())
        << ")";
  out << "\n";
  out.flush();
}

// The measured timeline: every action run, in each rank's order ("0F1": stage 0's forward of
// microbatch 1, as `cleave schedule` names it), seconds from the step's start on its rank.
Json actionTimeline(const runtime::distributed::StepTiming& timing) {
  using runtime::distributed::StepTiming;
  const std::size_t stages = timing.forwardSeconds.size();
  const std::size_t microbatches =
      stages ? timing.actionSeconds.size() / (StepTiming::kSlotFields * StepTiming::kComputeTypes * stages) : 0;
  std::vector<std::tuple<int, double, Json>> rows;
  for (std::size_t stage = 0; stage < stages; ++stage)
    for (std::size_t m = 0; m < microbatches; ++m)
      for (std::size_t t = 0; t < StepTiming::kComputeTypes; ++t) {
        const auto type = static_cast<pipeline::ActionType>(t);
        const double* slot =
            &timing.actionSeconds[StepTiming::kSlotFields * StepTiming::actionSlot(stage, m, microbatches, type)];
        if (slot[1] <= 0.0)
          continue; // not run
        pipeline::Action action{static_cast<std::uint32_t>(stage), type, static_cast<std::uint32_t>(m)};
        const int rank = static_cast<int>(slot[3]); // the rank that ran it
        rows.emplace_back(rank, slot[0],
                          Json{{"rank", rank}, {"action", pipeline::formatAction(action)}, {"start_s", slot[0]},
                               {"end_s", slot[1]}, {"wait_s", slot[2]}, {"compute_s", slot[4]}});
      }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
  });
  Json list = Json::array();
  for (auto& row : rows)
    list.push_back(std::move(std::get<2>(row)));
  return list;
}

// A plan's step timing across ranks (collective): wall seconds, per-stage compute, bubble, and
// the measured timeline.
Expected<Json> planStepTiming(const runtime::distributed::PipelineTrainer& trainer, int ranks) {
  runtime::distributed::StepTiming timing;
  CLEAVE_CHECK(trainer.gatherStepTiming(timing));
  double compute = 0.0;
  for (std::size_t i = 0; i < timing.forwardSeconds.size(); ++i)
    compute += timing.forwardSeconds[i] + timing.backwardSeconds[i];
  // The schedule's bubble (idle share of ranks x the schedule's wall time), as the simulator's.
  double bubble = timing.scheduleSeconds > 0 ? 1.0 - compute / (ranks * timing.scheduleSeconds) : 0.0;
  return Json{{"seconds", timing.stepSeconds},
              {"schedule_seconds", timing.scheduleSeconds},
              {"stage_forward_s", timing.forwardSeconds},
              {"stage_backward_s", timing.backwardSeconds},
              {"stage_weight_s", timing.weightSeconds},
              {"rank_schedule_s", timing.rankScheduleSeconds},
              {"rank_wait_s", timing.rankWaitSeconds},
              {"rank_receives", std::vector<std::int64_t>(timing.rankReceives.begin(), timing.rankReceives.end())},
              {"rank_transport_cpu_s", timing.rankTransportSeconds},
              {"rank_peak_step_bytes", std::vector<std::int64_t>(timing.rankPeakStepBytes.begin(),
                                                                 timing.rankPeakStepBytes.end())},
              {"rank_replica_wait_s", timing.rankReplicaWaitSeconds},
              {"stage_forward_bytes", std::vector<std::int64_t>(timing.stageForwardBytes.begin(),
                                                                timing.stageForwardBytes.end())},
              {"stage_backward_bytes", std::vector<std::int64_t>(timing.stageBackwardBytes.begin(),
                                                                 timing.stageBackwardBytes.end())},
              {"stage_gradient_bytes", std::vector<std::int64_t>(timing.stageGradientBytes.begin(),
                                                                 timing.stageGradientBytes.end())},
              {"shape_headers", static_cast<std::int64_t>(timing.headersSent)},
              {"bubble", bubble},
              {"actions", actionTimeline(timing)}};
}

using runtime::distributed::LayoutCommunicators;
using runtime::distributed::RankLayout;

// Microbatches (or a batch) of other rows than the plan's static-batch export fixed run only where
// no constant shape holds that batch: refused here in one line rather than deep inside a step.
Status checkTrainingRows(const TrainFlags& flags, const RankLayout& layout, const plan::PlanFile& planFile) {
  const std::int64_t exported = plan::exportedRows(planFile);
  const std::int64_t rows = layout.replicaRows(flags.options.batch), microbatches = flags.options.microbatches;
  if (exported < 0 || (microbatches <= 1 && rows == exported))
    return {};
  std::string what = "training --batch " + std::to_string(flags.options.batch);
  if (layout.replicas() > 1)
    what += " (" + std::to_string(rows) + " rows per replica)";
  return plan::checkRowsCanChange(flags.path, planFile, what + " in " + std::to_string(microbatches) + " microbatch(es)");
}

// Checkpoint flags that need one another, and folders that would clash, refused before any step.
Status checkCheckpointFlags(const TrainFlags& flags) {
  if ((flags.checkpoints.every > 0 || flags.checkpoints.stopAfter) && flags.checkpoints.folder().empty())
    return usageError() << (flags.checkpoints.stopAfter ? "--stop-after" : "--checkpoint-every")
                        << " needs a folder for checkpoints: --checkpoint-dir D (or --resume D)";
  if (flags.checkpoints.stopAfter && *flags.checkpoints.stopAfter > flags.steps)
    return usageError() << "--stop-after " << *flags.checkpoints.stopAfter << " is past --steps " << flags.steps;
  const std::string& dir = flags.checkpoints.folder();
  if (!dir.empty()) { // a folder, or none yet
    if (Expected<std::optional<std::int64_t>> listed = runtime::latestCheckpoint(dir); !listed)
      return std::move(listed.error());
  }
  if (!flags.checkpoints.resumeDir.empty()) {
    CLEAVE_TRY(std::optional<std::int64_t> latest, runtime::latestCheckpoint(flags.checkpoints.resumeDir));
    if (!latest)
      return Error(ErrorCode::InvalidArgument) << "--resume " << flags.checkpoints.resumeDir << ": no complete checkpoint there";
  }
  if (!dir.empty() && !flags.output.path.empty() &&
      (isSameOrInside(dir, flags.output.path) || isSameOrInside(flags.output.path, dir)))
    return usageError() << "checkpoints (" << dir << ") and -o " << flags.output.path
                        << " must be separate folders: -o replaces its folder whole";
  return {};
}

// Data flags that need another, and a --log that would overwrite an input or land in -o.
Status checkDataFlags(const TrainFlags& flags) {
  if (flags.tokens.empty() && (!flags.tokenInputs.empty() || flags.seqLen || flags.sampling != "random"))
    return usageError() << (flags.seqLen ? "--seq-len" : !flags.tokenInputs.empty() ? "--token-inputs" : "--sampling")
                        << " is for token data: give --tokens uint16|uint32|npy";
  if (flags.evalDataPath.empty() && flags.evalEvery > 0)
    return usageError() << "--eval-every needs held-out data: --eval-data FILE";
  if (flags.logPath.empty())
    return {};
  for (const std::string* input : {&flags.path, &flags.dataPath, &flags.evalDataPath, &flags.wholeModelPath})
    if (!input->empty() && isSameOrInside(flags.logPath, *input))
      return usageError() << "--log " << flags.logPath << " would overwrite the input " << *input;
  if (!flags.output.path.empty() && isSameOrInside(flags.logPath, flags.output.path))
    return usageError() << "--log " << flags.logPath << " must be outside -o " << flags.output.path
                        << ": -o replaces its folder whole";
  return {};
}

runtime::CheckpointIdentity checkpointIdentity(const TrainFlags& flags, const RankLayout& layout, std::string model,
                                               const runtime::TrainingData& data) {
  return {layout.ranks, layout.pipelineRanks, flags.options.batch, std::move(model),
          std::string(runtime::kOptimizerKinds.name(flags.options.optimizer.kind)), flags.options.lrSchedule.describe(),
          data.describe()};
}

// --data, and --eval-data when given.
struct TrainingSources {
  std::unique_ptr<runtime::TrainingData> data, eval;
};

Expected<TrainingSources> openSources(const TrainFlags& flags, const std::vector<std::string>& inputs,
                                      std::span<const ir::Graph* const> graphs) {
  TrainingSources sources;
  Expected<std::unique_ptr<runtime::TrainingData>> data =
      runtime::openTrainingData(flags.dataPath, flags.tokenOptions(), inputs, graphs);
  if (!data)
    return std::move(data.error().withContext("--data " + flags.dataPath));
  sources.data = std::move(*data);
  if (flags.evalDataPath.empty())
    return sources;
  Expected<std::unique_ptr<runtime::TrainingData>> eval =
      runtime::openTrainingData(flags.evalDataPath, flags.tokenOptions(), inputs, graphs);
  if (!eval)
    return std::move(eval.error().withContext("--eval-data " + flags.evalDataPath));
  sources.eval = std::move(*eval);
  return sources;
}

// One trainer as the step loop sees it: a model's or a plan's.
struct StepLoop {
  runtime::distributed::Communicator& comm;
  runtime::RankTrainingState state;
  runtime::CheckpointIdentity identity;
  runtime::TrainableSet trainable;
  const runtime::TrainingData& data;
  std::optional<double> flopsPerRow; // runtime/training/throughput.h
  std::function<Expected<runtime::StepResult>(std::int64_t)> step;
  std::function<Expected<Json>(double seconds)> timing; // --timing's measurements (may be collective)
  std::function<Expected<double>()> evaluate;           // the held-out loss (collective); null without --eval-data
  const runtime::TrainingData* evalData = nullptr;      // what `evaluate` reads
};

// Whether step `step` (from 0) is followed by a held-out loss: every --eval-every, and the last.
bool evaluatesAfter(const TrainFlags& flags, const StepLoop& loop, std::int64_t step) {
  return loop.evaluate && ((flags.evalEvery > 0 && (step + 1) % flags.evalEvery == 0) || step + 1 == flags.steps);
}

// --log: the step's line with its rows' window starts (token data), one JSON line, flushed.
void logStep(const TrainFlags& flags, const StepLoop& loop, const StepLine& line, std::ofstream& log) {
  Json json = stepJson(line, nullptr, true);
  std::vector<std::int64_t> starts = loop.data.windowStarts(line.step * flags.options.batch, flags.options.batch);
  if (!starts.empty())
    json["window_starts"] = std::move(starts);
  if (line.evalLoss && loop.evalData) // the same rows each time: the held-out batches'
    if (std::vector<std::int64_t> held = loop.evalData->windowStarts(0, flags.evalBatches * flags.options.batch);
        !held.empty())
      json["eval_window_starts"] = std::move(held);
  log << toJsonText(json) << "\n";
  log.flush();
}

// Steps `first` to --steps (or --stop-after): rank 0 prints every --print-every-th (and logs each);
// held-out losses and checkpoints as asked.
Status runSteps(const TrainFlags& flags, std::int64_t first, StepLoop& loop, std::ostream& out, std::ostream& err) {
  const std::int64_t last = flags.checkpoints.lastStep(flags.steps);
  std::optional<std::ofstream> log;
  if (!flags.logPath.empty() && loop.comm.rank() == 0) {
    log.emplace(flags.logPath, std::ios::trunc);
    if (!*log)
      return Error(ErrorCode::IoError) << "--log " << flags.logPath << ": cannot write";
  }
  runtime::ThroughputMeter meter(flags.options.batch, loop.data.tokensPerRow(), loop.flopsPerRow, last - first);
  std::int64_t skipped = 0;
  for (std::int64_t step = first; step < last; ++step) {
    meter.startStep();
    StepLine line{step};
    CLEAVE_TRY(line.result, loop.step(step));
    line.rate = meter.endStep();
    skipped += line.result.skipped;
    if (flags.timing) {
      CLEAVE_TRY(line.timing, loop.timing(line.rate.seconds));
    }
    if (evaluatesAfter(flags, loop, step)) {
      CLEAVE_TRY(line.evalLoss, loop.evaluate());
    }
    const bool printed = step == first || step + 1 == last || line.evalLoss || (step + 1) % flags.printInterval() == 0;
    if (loop.comm.rank() == 0 && printed)
      printStep(flags, line, step == first ? &loop.trainable : nullptr, out);
    if (log)
      logStep(flags, loop, line, *log);
    if (flags.checkpoints.after(step + 1, flags.steps))
      CLEAVE_CHECK(runtime::distributed::saveCheckpoint(flags.checkpoints, loop.comm, step + 1, loop.state, loop.identity));
  }
  if (skipped && loop.comm.rank() == 0)
    err << "skipped " << skipped << " of " << last - first << " step(s): loss or gradients not finite\n";
  return {};
}

// The schedule each rank of a pipeline follows (--schedule under launch; none: GPipe order),
// after checking that a replica's rows make the microbatches it is for.
Expected<std::optional<pipeline::Schedule>> pipelineSchedule(const TrainFlags& flags, const RankLayout& layout,
                                                             std::size_t stages) {
  const std::int64_t rows = layout.replicaRows(flags.options.batch), microbatches = flags.options.microbatches;
  const std::int64_t made = runtime::microbatchCount(rows, microbatches);
  if (flags.schedule && made != microbatches)
    return usageError() << "--schedule " << pipeline::kScheduleKinds.name(*flags.schedule) << " needs --batch "
                        << flags.options.batch
                        << (layout.replicas() > 1 ? " (" + std::to_string(rows) + " rows per replica)" : std::string())
                        << " to split into " << microbatches << " microbatches, and it makes " << made << " (of at most "
                        << (rows + microbatches - 1) / microbatches << " rows, as torch.chunk splits): take --microbatches "
                        << made << " or a batch that splits into " << microbatches;
  std::optional<pipeline::Schedule> schedule;
  if (flags.schedule && layout.pipelineRanks > 1) {
    CLEAVE_TRY(schedule, rankSchedule(*flags.schedule, stages, microbatches, layout.pipelineRanks));
  }
  return schedule;
}

// "rank 3 of 4 (pipeline rank 1 of replica 1): trained submod_1, submod_3" on stderr.
void reportTrained(const RankLayout& layout, const runtime::distributed::PipelineTrainer& trainer, std::ostream& err) {
  err << "rank " << layout.rank << " of " << layout.ranks;
  if (layout.replicas() > 1)
    err << " (pipeline rank " << layout.pipelineRank() << " of replica " << layout.replica() << ")";
  err << ": trained";
  for (const std::string& stage : trainer.ownStages())
    err << " " << stage;
  err << "\n";
}

// A plan directory: its stages on this process (no RANK) or on this rank's share (under launch):
// one pipeline over every rank, or replicas of a --pipeline-ranks pipeline side by side.
Status trainPlan(const TrainFlags& flags, std::ostream& out, std::ostream& err) {
  // Everything the user gave is checked before connecting, so a bad input fails on every rank
  // alike in one line, and no rank waits for another that has already given up.
  std::optional<runtime::distributed::DistributedEnv> env;
  if (std::getenv("RANK")) {
    CLEAVE_TRY(env, runtime::distributed::readDistributedEnv());
  }
  CLEAVE_TRY(const RankLayout layout, runtime::distributed::rankLayout(env, flags.pipelineRanks, flags.options.batch));
  CLEAVE_TRY(const std::string transport, runtime::distributed::chooseTransport(flags.transport, flags.backend));
  // Rank 0 alone writes OUT (a plan directory like the input, its stages trained).
  Expected<std::optional<OutputDirectory>> opened =
      layout.rank == 0 ? openOutputDirectory(flags.output, {flags.path, flags.dataPath, flags.evalDataPath, flags.wholeModelPath})
                       : Expected<std::optional<OutputDirectory>>(std::nullopt);
  if (!opened)
    return std::move(opened.error());
  std::optional<OutputDirectory>& outDir = *opened;
  CLEAVE_TRY(std::unique_ptr<runtime::Backend> backend,
             runtime::makeBackend(runtime::distributed::rankBackend(flags.backend, env ? &*env : nullptr)));
  const pipeline::Placement placement = flags.schedule ? pipeline::placementOf(*flags.schedule) : pipeline::Placement::Loop;
  CLEAVE_TRY(auto trainer, runtime::distributed::PipelineTrainer::create(flags.path, flags.options, layout.pipelineRank(),
                                                                         layout.pipelineRanks, *backend, placement));
  CLEAVE_CHECK(checkTrainingRows(flags, layout, trainer->planFile()));
  std::optional<ir::Graph> whole;
  if (!flags.wholeModelPath.empty()) {
    Expected<ir::Graph> loaded = io::loadModel(flags.wholeModelPath);
    Status fits = loaded ? trainer->checkWholeModel(*loaded) : Status(std::move(loaded.error()));
    if (!fits)
      return std::move(fits.error().withContext("--model " + flags.wholeModelPath));
    whole = std::move(*loaded);
  }
  const std::vector<const ir::Graph*> stageGraphs = trainer->stageGraphs();
  CLEAVE_TRY(TrainingSources sources, openSources(flags, trainer->graphInputs(), stageGraphs));
  for (const auto& [source, path] : {std::pair{sources.data.get(), &flags.dataPath}, {sources.eval.get(), &flags.evalDataPath}}) {
    Expected<runtime::TensorMap> sample = source ? source->rows(0, 1) : runtime::TensorMap();
    Status fits = sample ? trainer->checkData(*sample) : Status(std::move(sample.error()));
    if (!fits)
      return std::move(fits.error().withContext((source == sources.data.get() ? "--data " : "--eval-data ") + *path));
  }
  CLEAVE_TRY(std::optional<pipeline::Schedule> schedule, pipelineSchedule(flags, layout, trainer->stages()));
  std::string stageNames;
  for (std::size_t i = 0; i < trainer->stages(); ++i)
    stageNames += (i ? ", " : "the plan's stages ") + trainer->stageName(i);
  const runtime::CheckpointIdentity identity = checkpointIdentity(flags, layout, stageNames, *sources.data);
  CLEAVE_TRY(std::int64_t first, runtime::distributed::resumeStep(flags.checkpoints, flags.steps, layout.rank, identity, trainer->trainingState(), err));
  CLEAVE_TRY(LayoutCommunicators comms, runtime::distributed::connectLayout(layout, transport, env));
  CLEAVE_CHECK(trainer->connect(comms.ofPipeline(), comms.replicas.get()));
  StepLoop loop{*comms.world, trainer->trainingState(), identity, runtime::trainableSet(stageGraphs), *sources.data,
                runtime::trainingFlopsPerRow(stageGraphs),
                [&](std::int64_t step) { return trainer->step(*sources.data, step, schedule ? &*schedule : nullptr); },
                [&](double) { return planStepTiming(*trainer, layout.pipelineRanks); }, nullptr};
  if (sources.eval) {
    loop.evaluate = [&] { return trainer->evaluate(*sources.eval, flags.evalBatches); };
    loop.evalData = sources.eval.get();
  }
  CLEAVE_CHECK(runSteps(flags, first, loop, out, err));
  reportTrained(layout, *trainer, err);
  if (flags.output.path.empty() || layout.replica() != 0) // the replicas' parameters are equal: the first's are written
    return {};
  CLEAVE_CHECK(trainer->writeTrained(flags.path, outDir ? outDir->stagingPath() : std::string(), whole ? &*whole : nullptr));
  return outDir ? outDir->commit() : Status{};
}

Status train(TrainFlags& flags, std::ostream& out, std::ostream& err) {
  // Each step frees what the next allocates again: keep it resident rather than fault it back in.
  runtime::keepFreedHostMemory();
  flags.options.lrSchedule.steps = flags.steps;
  CLEAVE_CHECK(checkCheckpointFlags(flags));
  CLEAVE_CHECK(checkDataFlags(flags));
  // Before any call into ATen's CUDA hooks (manual_seed seeds every GPU): libtorch keeps the
  // first answer it gets, so a CUDA wing loaded after it would find CUDA off for good.
  CLEAVE_CHECK(runtime::loadBackendWing(flags.backend));
  at::manual_seed(flags.seed);
  flags.options.seed = flags.seed;
  flags.options.nonFinite = flags.skipNonFinite ? runtime::NonFinitePolicy::Skip : runtime::NonFinitePolicy::Stop;
  if (!flags.betas.empty()) {
    flags.options.optimizer.beta1 = flags.betas[0];
    flags.options.optimizer.beta2 = flags.betas[1];
  }
  if (plan::isPlanDirectory(flags.path)) {
    if (!flags.fixedPatterns.frozen.empty() || !flags.fixedPatterns.trainable.empty())
      return usageError() << "--frozen and --trainable are for a model; a plan trains what it records: give them "
                             "to cleave pipeline";
    return trainPlan(flags, out, err);
  }
  if (!flags.wholeModelPath.empty())
    return usageError() << "--model is for plan directories (MODEL is a model already)";
  if (flags.pipelineRanks)
    return usageError() << "--pipeline-ranks is for plan directories (MODEL is a whole model)";
  if (flags.options.recompute == runtime::Recompute::Stage)
    return usageError() << "--recompute stage is for plan directories: a whole model runs each microbatch's "
                           "backward right after its forward, so there is no stage to recompute (selective is "
                           "for both)";
  CLEAVE_TRY(std::optional<OutputDirectory> outDir, openOutputDirectory(flags.output, {flags.path, flags.dataPath, flags.evalDataPath}));
  CLEAVE_TRY(ir::Graph loaded, io::loadModel(flags.path, {.fixedPatterns = flags.fixedPatterns,
                                                          .expandFunctions = runtime::opsWithoutKernels()}));
  auto graph = std::make_shared<const ir::Graph>(std::move(loaded));
  const ir::Graph* modelGraph = graph.get();
  CLEAVE_TRY(TrainingSources sources, openSources(flags, ir::graphInputNames(*graph), {&modelGraph, 1}));
  CLEAVE_TRY(std::unique_ptr<runtime::Backend> backend, runtime::makeBackend(flags.backend));
  CLEAVE_TRY(std::unique_ptr<runtime::Trainer> trainer, runtime::Trainer::create(graph, flags.options, *backend));
  const runtime::CheckpointIdentity identity = checkpointIdentity(flags, RankLayout{}, "the whole model", *sources.data);
  CLEAVE_TRY(std::int64_t first, runtime::distributed::resumeStep(flags.checkpoints, flags.steps, 0, identity, trainer->trainingState(), err));
  std::unique_ptr<runtime::distributed::Communicator> comm = runtime::distributed::Communicator::local();
  StepLoop loop{*comm, trainer->trainingState(), identity, runtime::trainableSet({&modelGraph, 1}), *sources.data,
                runtime::trainingFlopsPerRow({&modelGraph, 1}),
                [&](std::int64_t step) { return trainer->step(*sources.data, step); },
                [](double seconds) -> Expected<Json> { return Json{{"seconds", seconds}}; }, nullptr};
  if (sources.eval) {
    loop.evaluate = [&] { return trainer->evaluate(*sources.eval, flags.evalBatches); };
    loop.evalData = sources.eval.get();
  }
  CLEAVE_CHECK(runSteps(flags, first, loop, out, err));
  if (!outDir)
    return {};
  CLEAVE_TRY(ir::Graph trained, trainer->trainedGraph());
  CLEAVE_CHECK(io::writeOnnx(trained, (std::filesystem::path(outDir->stagingPath()) / "trained.onnx").string()));
  return outDir->commit();
}
} // namespace

const CommandBody kTrainBody{"train", parseThenRun<TrainFlags, describe, train>};

} // namespace cleave::cli
