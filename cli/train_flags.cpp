#include "cli/train_flags.h"

#include "cli/commands.h"
#include "cli/planning_model.h"
#include "cli/runtime_options.h"

namespace cleave::cli {
namespace {

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
  app.add_option("--seq-lens", flags.seqLens,
                 "with --tokens: rows whose length changes, as packed or bucketed batches change it: lengths taken in "
                 "turn (64,128,96) or a bucketing rule MIN-MAX/STEP (32-128/32: one of 32, 64, 96, 128 drawn by "
                 "--seed), one per step or per microbatch (--seq-len-per); windows are drawn at the longest and a row "
                 "reads its first ids. The model needs a dynamic sequence length");
  app.add_option("--seq-len-per", flags.seqLenPer,
                 "with --seq-lens: step (every row of a step one length) or microbatch (each microbatch its own; "
                 "--batch must split into equal microbatches on every replica)")
      ->check(CLI::IsMember(runtime::kLengthChanges.names()))
      ->capture_default_str();
  app.add_option("--row-lengths", flags.rowLengths,
                 "with --tokens: the stream holds ragged rows end to end (documents) and this 1-D integer .npy "
                 "their lengths in ids; a row is one of them (--sampling: random, or epochs visiting each once), its "
                 "ids but the last the input, but the first the targets; each microbatch pads its rows to its "
                 "longest, inputs with 0 and targets with -100 (cross_entropy's ignore_index). The model needs a "
                 "dynamic sequence length");
  app.add_option("--sampling", flags.sampling,
                 "with --tokens: random, a window at a random offset per row (nanoGPT's get_batch), or epochs, every "
                 "window of the stream once per epoch in an order shuffled by --seed; a row's window depends on its "
                 "number and --seed alone, so ranks, replicas (disjoint shares) and resumed runs agree")
      ->check(CLI::IsMember(runtime::kSamplings.names()))
      ->capture_default_str();
  app.add_option("--eval-data", flags.request.evalData,
                 "held-out data (the format of --data): its loss over --eval-batches batches of --batch rows, run as "
                 "torch's model.eval() under no_grad (dropout off, BatchNorm's statistics untouched), every "
                 "--eval-every steps and after the last");
  app.add_option("--eval-every", flags.request.evalEvery, "steps between held-out losses (default: only after the last)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--eval-batches", flags.request.evalBatches, "batches of --batch rows the held-out loss averages (the same rows each time)")
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
  app.add_option("--checkpoint-dir", flags.request.checkpoints.checkpointDir,
                 "write checkpoints into this folder (every rank must see it): each rank's parameters, optimizer "
                 "state, RNG state and the step, whole on every rank or not at all; at the run's end, at "
                 "--stop-after, and every --checkpoint-every steps; only the last complete one is kept. Under "
                 "`cleave launch --max-restarts`, a restarted run resumes from it");
  app.add_option("--checkpoint-every", flags.request.checkpoints.every, "steps between checkpoints (needs --checkpoint-dir)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--resume", flags.request.checkpoints.resumeDir,
                 "continue from the last complete checkpoint in this folder, exactly as the run that wrote it would "
                 "have gone on (a checkpoint of another model, plan, rank count, --batch, --optimizer or schedule "
                 "is refused, naming what differs); checkpoints go on into it unless --checkpoint-dir says otherwise");
  app.add_option("--stop-after", flags.request.checkpoints.stopAfter,
                 "stop after this step of --steps, writing a checkpoint there (a job with a time limit: the next "
                 "one continues with --resume, the schedule still spanning --steps)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--seed", flags.request.options.seed,
                 "seeds the random generator every rank starts with (libtorch's own is seeded at random: a fixed "
                 "seed makes runs and their checkpoints repeat byte for byte); dropout draws from it, seeded anew "
                 "for each stage, step and microbatch, so its masks do not depend on the ranks")
      ->capture_default_str();
}

} // namespace

void describeTrain(CLI::App& app, TrainFlags& flags) {
  app.description("Train a model exported with its loss (targets are inputs) on ATen autograd and PyTorch's own "
                  "optimizers: per step the next --batch rows of --data, in --microbatches (gradients accumulated, "
                  "each loss scaled by its share of the rows), then one optimizer step. A pipeline plan directory "
                  "trains its stages: in this process, or under `cleave launch` stage i on rank i % ranks. Prints "
                  "each step's loss; -o DIR gets trained.onnx (whole models) or, for a plan, a plan directory of the "
                  "trained stages (runs with `cleave run DIR`), plus trained.onnx when --model names the model the "
                  "plan was cut from.");
  app.add_option("MODEL", flags.request.model, "ONNX model exported with its loss, or a pipeline plan directory")->required();
  app.add_option("--data", flags.request.data,
                 "training data: every model input, rows along dim 0 (.npz, .json, folder), or a token stream (--tokens)")
      ->required();
  app.add_option("--batch", flags.request.options.batch, "rows per step")->required()->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--steps", flags.request.steps, "optimizer steps")->capture_default_str()->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--microbatches", flags.request.options.microbatches, "microbatches per step")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  addEnumOption(app, "--optimizer", flags.request.options.optimizer.kind, runtime::kOptimizerKinds, "optimizer");
  app.add_option("--lr", flags.request.options.optimizer.lr, "learning rate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->check(kFinite);
  app.add_option("--momentum", flags.request.options.optimizer.momentum, "sgd momentum")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->check(kFinite);
  app.add_option("--weight-decay", flags.request.options.optimizer.weightDecay, "weight decay (default: PyTorch's, sgd 0, adamw 0.01)")
      ->check(CLI::NonNegativeNumber)
      ->check(kFinite);
  app.add_option("--betas", flags.betas, "adamw betas B1,B2 (default 0.9,0.999)")
      ->delimiter(',')
      ->expected(2)
      ->check(kFinite);
  addEnumOption(app, "--precision", flags.request.options.precision, runtime::kTrainingPrecisions,
                "the forward's precision: bf16 is torch.autocast(dtype=torch.bfloat16) (matrix products and "
                "convolutions in bf16, precision-sensitive ops in float32) with float32 master weights, gradients "
                "and optimizer");
  addEnumOption(app, "--recompute", flags.request.options.recompute, runtime::kRecomputeKinds,
                "stage (plan directories) runs each stage's forward without keeping its activations and runs it "
                "again before that microbatch's backward (only stage inputs are held across the schedule); "
                "selective keeps linear and convolution outputs and recomputes attention's scores and softmax "
                "in the backward (Megatron-LM's selective recomputation); gradients unchanged; --timing "
                "reports each rank's peak bytes");
  addEnumOption(app, "--lr-schedule", flags.request.options.lrSchedule.kind, runtime::kLrScheduleKinds,
                "the rate after warmup: constant at --lr, or linear or cosine decay from --lr to 0 at the last of --steps "
                "(PyTorch's LinearLR / CosineAnnealingLR)");
  app.add_option("--warmup", flags.request.options.lrSchedule.warmup,
                 "steps of linear warmup to --lr: step t < N trains at lr (t+1)/(N+1) (PyTorch's LinearLR)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 30));
  app.add_option("--clip-grad-norm", flags.request.options.clipGradNorm,
                 "clip the gradients' global L2 norm (all stages and ranks, a tied weight once) to X, as "
                 "torch.nn.utils.clip_grad_norm_; each step's norm before clipping is printed")
      ->check(CLI::PositiveNumber)
      ->check(kFinite);
  app.add_flag("--skip-nonfinite", flags.skipNonFinite,
               "skip a step whose loss or gradients' norm is NaN or infinite (its gradients dropped, parameters "
               "and optimizer state unchanged, as torch.amp's GradScaler skips), counting such steps; without it "
               "such a step stops the run with exit 1 before it changes any parameter, and nothing is written");
  app.add_option("--pipeline-ranks", flags.request.pipelineRanks,
                 "plan directories under launch: ranks per pipeline (default: every rank). With more ranks, they "
                 "hold replicas of the pipeline (data x pipeline parallel): rank r is pipeline rank r % N of "
                 "replica r / N, each replica trains on its equal share of --batch in --microbatches, and every "
                 "stage's gradients are summed across the replicas as soon as its backward is done")
      ->check(CLI::Range(1, 1 << 20));
  addScheduleOption(app, flags.request.schedule,
                    "plan directories under launch: the pipeline schedule each rank follows (default gpipe; in one "
                    "process stages run in GPipe order)");
  app.add_option("--backend", flags.request.backend,
                 "where to train: aten-cpu, or aten-cuda[:N] (GPU N; under launch, aten-cuda is GPU LOCAL_RANK) (a "
                 "plan's stages on a device whose devices-file entry names a backend train there)")
      ->capture_default_str();
  app.add_option("--transport", flags.request.transport,
                 "plan directories under launch: how the ranks talk. gloo (TCP, CPU tensors), nccl (GPU tensors; "
                 "a build with CUDA: a stream per channel, receives in each sender's order), or auto: nccl where "
                 "--backend aten-cuda and this build has it, else gloo")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}))
      ->capture_default_str();
  app.add_option("--loss", flags.request.options.loss, "the output that is the loss (default: 'loss', else the only scalar)");
  addTrainableFlags(app, flags.request.fixedPatterns);
  app.add_option("--model", flags.request.wholeModel,
                 "plan directories: the model the plan was cut from; -o DIR then gets its trained.onnx too");
  addOutputDirectory(app, flags.output, "directory for trained.onnx (a model) or the trained plan (a plan)");
  describeCheckpoints(app, flags);
  describeData(app, flags);
  app.add_flag("--json", flags.json,
               "print one JSON line per step: {\"step\": N, \"loss\": X, \"lr\": R} (and \"grad_norm\" when clipping; the first line also \"trainable\": what trains, what "
               "stays fixed and why, and how many running statistics it updates)");
  app.add_flag("--timing", flags.request.timing,
               "also print each step's wall seconds and, for a plan, the schedule's part of it, every stage's forward "
               "and backward compute seconds, the measured bubble (1 - compute / (ranks x schedule seconds)), each rank's "
               "messages received, its transport threads' CPU seconds, its wait for the replicas' gradient sums, each "
               "rank's peak step bytes and each stage's bytes a forward holds, a backward rises by and its gradients "
               "take (the inputs of cleave schedule --simulate's memory model) and, with --json, every action's start, "
               "end, receive wait and compute seconds per rank");
}

Expected<runtime::distributed::TrainingRequest> trainingRequest(const TrainFlags& flags) {
  runtime::distributed::TrainingRequest request = flags.request;
  if (!flags.betas.empty()) {
    request.options.optimizer.beta1 = flags.betas[0];
    request.options.optimizer.beta2 = flags.betas[1];
  }
  request.options.nonFinite = flags.skipNonFinite ? runtime::NonFinitePolicy::Skip : runtime::NonFinitePolicy::Stop;
  if (!flags.tokens.empty())
    request.tokens = runtime::TokenDataOptions{*runtime::kTokenFormats.parse(flags.tokens),
                                               *runtime::kSamplings.parse(flags.sampling), request.options.seed,
                                               flags.tokenInputs, flags.seqLen};
  if (!flags.rowLengths.empty())
    request.tokens->rowLengths = flags.rowLengths;
  if (!flags.seqLens.empty()) {
    Expected<runtime::SequenceLengths> lengths = runtime::SequenceLengths::parse(flags.seqLens, request.options.seed);
    if (!lengths)
      return usageError() << lengths.error().message();
    request.tokens->lengths = std::move(*lengths);
    request.tokens->lengthChange = *runtime::kLengthChanges.parse(flags.seqLenPer);
  }
  request.outputPath = flags.output.path;
  return request;
}

} // namespace cleave::cli
