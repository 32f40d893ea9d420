// cli/cmd_run.cpp - `cleave run MODEL|OUT_DIR [--inputs FILE | --random --seed S] [--repeat N [--baseline OTHER
// [--baseline-options FLAGS]]] [--pipeline | --distributed [--schedule S]] [--microbatches M] [--graph-replay]
// [--inputs-on-device]`: parses, times the model through runtime/model/run_harness.h (or runs this rank's
// part through runtime/distributed/rank_run.h) and prints report/run_report.h's rendering.
#include <algorithm>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/runtime_inputs.h"
#include "cli/runtime_library.h"
#include "plan/fixed_batch_check.h"
#include "report/run_report.h"
#include "runtime/distributed/rank_run.h"
#include "runtime/engine/host_memory.h"
#include "runtime/model/run_harness.h"
#include "runtime/model/tensor_files.h"

namespace cleave::cli {
namespace {

struct RunFlags {
  std::string path, saveOutputs;
  std::string baseline; // --baseline: a model or cut model timed run by run beside this one
  std::string baselineOptions; // --baseline-options: its runtime flags, instead of this run's
  RuntimeOptions runtime;
  int repeat = 1;
  bool json = false, profile = false, pipelined = false, distributed = false, graphReplay = false;
  bool inputsOnDevice = false; // --inputs-on-device
  std::optional<pipeline::ScheduleKind> schedule; // --distributed's order
  std::int64_t microbatches = 1;
};

void describe(CLI::App& app, RunFlags& flags) {
  app.description("Run a model, or a cut model (a split/partition output directory), on ATen; print output "
                  "summaries and timings.");
  app.add_option("MODEL", flags.path, "ONNX model, or a directory with plan.json")->required();
  addRuntimeOptions(app, flags.runtime);
  app.add_option("--repeat", flags.repeat, "runs to time (the first one is included)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--baseline", flags.baseline,
                 "another model or cut model (the same inputs; this run's runtime options unless --baseline-options) "
                 "to time against in this process: "
                 "the two run alternately, each pair in the other order than the last, and the ratio this / "
                 "baseline is reported per pair (median, middle half, range): a paired A/B that a drift in the "
                 "machine's speed falls on both sides of");
  app.add_option("--baseline-options", flags.baselineOptions,
                 "the baseline's --backend and optimization flags instead of this run's, as one string (e.g. "
                 "\"--no-winograd\"): an optimization's worth, paired run by run");
  app.add_option("--save-outputs", flags.saveOutputs, "write the outputs: FILE.json, FILE.npz, FILE.npy / FILE.pb (one output), or DIR/ (output_N.pb)");
  CLI::Option* pipelined = app.add_flag(
      "--pipeline", flags.pipelined,
      "run a pipeline plan's stages microbatch by microbatch (inputs split along dim 0, outputs merged)");
  CLI::Option* distributed = app.add_flag(
      "--distributed", flags.distributed,
      "under `cleave launch`: each rank runs its submodules (i % ranks) on c10d (Gloo), microbatch by "
      "microbatch; rank 0 prints and saves the outputs");
  distributed->excludes(pipelined);
  addScheduleOption(app, flags.schedule,
                    "with --distributed: each rank runs its forwards in this pipeline schedule's order (default "
                    "gpipe: microbatch by microbatch)");
  app.add_option("--microbatches", flags.microbatches, "microbatches for --pipeline / --distributed")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  CLI::Option* profile = app.add_flag("--profile", flags.profile,
               "time every kernel; report seconds per op type, the slowest nodes, the time outside kernels and peak "
               "memory (last run)");
  app.add_flag("--graph-replay", flags.graphReplay,
               "record the model's device work once per input shape and replay it (CUDA graphs: one launch a run "
               "instead of one per kernel); a shape whose run the device cannot record (a step reads a device value "
               "on the host) runs as usual, and --json says why; on aten-cpu-as-gpu the CPU records by the same "
               "rule, to find such steps without a GPU")
      ->excludes(pipelined)
      ->excludes(distributed)
      ->excludes(profile);
  app.add_flag("--inputs-on-device", flags.inputsOnDevice,
               "put the inputs on the backend's device once, before the timed runs (as a caller whose tensors are "
               "already there, as PyTorch's are in its own timings); by default every run copies them from host "
               "memory")
      ->excludes(distributed);
  addJsonFlag(app, flags.json);
}

report::RunSubject runSubject(const RunFlags& flags) {
  return {flags.path, flags.baseline, flags.repeat,
          flags.pipelined ? std::optional<std::int64_t>(flags.microbatches) : std::nullopt, flags.profile};
}

// --distributed: this rank's part of the plan; rank 0 reports like a single-process run.
Status runDistributed(const RunFlags& flags, std::ostream& out, std::ostream& err) {
  runtime::distributed::RankRunRequest request{flags.path, flags.runtime.backend, flags.runtime.optimizations,
                                               flags.runtime.inputsPath};
  CLEAVE_TRY(request.dims, parseDims(flags.runtime.dims));
  request.seed = flags.runtime.seed;
  request.microbatches = flags.microbatches;
  request.schedule = flags.schedule;
  CLEAVE_TRY(runtime::distributed::RankRunResult result, runtime::distributed::runRank(request));
  err << report::rankRunLine(result.run);
  if (result.run.rank != 0)
    return {};
  if (!flags.saveOutputs.empty())
    CLEAVE_CHECK(runtime::writeTensors(result.outputs, flags.saveOutputs, result.outputNames));
  out << (flags.json ? dumpJson(report::rankRunJson(flags.path, result.run)) : report::rankRunText(result.run));
  return {};
}

// The baseline's runtime options: this run's, or --baseline-options parsed as the running
// commands' flags are.
Expected<RuntimeOptions> baselineRuntimeOptions(const RunFlags& flags) {
  if (flags.baselineOptions.empty())
    return flags.runtime;
  RuntimeOptions options;
  CLI::App parser;
  addRuntimeOptions(parser, options);
  try {
    parser.parse(flags.baselineOptions, false);
  } catch (const CLI::ParseError& error) {
    return usageError() << "--baseline-options '" << flags.baselineOptions << "': " << error.what();
  }
  return options;
}

// --baseline, opened with its runtime options; it must take the model's inputs.
Expected<OpenedRunnable> openBaseline(const RunFlags& flags, const runtime::Runnable& model) {
  CLEAVE_TRY(RuntimeOptions options, baselineRuntimeOptions(flags));
  Expected<OpenedRunnable> baseline = openRunnable(flags.baseline, options);
  if (!baseline)
    return baseline.error().withContext("--baseline");
  std::vector<std::string> theirs = baseline->runnable.inputNames(), ours = model.inputNames();
  std::sort(theirs.begin(), theirs.end());
  std::sort(ours.begin(), ours.end());
  if (theirs != ours)
    return Error(ErrorCode::InvalidArgument) << "--baseline " << flags.baseline
                                             << " takes other inputs than the model (names differ)";
  return baseline;
}

Status runModel(const RunFlags& flags, std::ostream& out, std::ostream& err) {
  if ((flags.pipelined || flags.distributed) && !plan::isPlanDirectory(flags.path))
    return usageError() << (flags.pipelined ? "--pipeline" : "--distributed")
                        << " runs a cut model directory (cleave pipeline -o DIR)";
  if (flags.microbatches != 1 && !flags.pipelined && !flags.distributed)
    return usageError() << "--microbatches goes with --pipeline or --distributed";
  if (flags.schedule && !flags.distributed)
    return usageError() << "--schedule goes with --distributed";
  if (!flags.baselineOptions.empty() && flags.baseline.empty())
    return usageError() << "--baseline-options goes with --baseline";
  if (!flags.baseline.empty() && flags.distributed)
    return usageError() << "--baseline times two models in one process, not with --distributed";
  if (!flags.baseline.empty() && flags.profile)
    return usageError() << "--profile measures one model's runs, not with --baseline";
  // Each run frees what the next allocates again: keep it resident rather than fault it back in.
  runtime::keepFreedHostMemory();
  if (flags.distributed)
    return runDistributed(flags, out, err);
  CLEAVE_TRY(OpenedRunnable opened, openRunnable(flags.path, flags.runtime));
  if (flags.pipelined) // a static batch's constants refused in one line, not mid-run
    CLEAVE_CHECK(plan::checkMicrobatchesCanRun(flags.path, opened.runnable.cut()->plan().file(), flags.microbatches));
  CLEAVE_TRY(runtime::TensorMap inputs, makeInputs(opened.runnable, flags.runtime));
  if (flags.inputsOnDevice)
    for (auto& [name, tensor] : inputs)
      if (runtime::holdsNumbers(tensor))
        tensor = tensor.to(opened.acc->device());
  if (flags.graphReplay)
    if (Status recordable = opened.runnable.replayDeviceWork(); !recordable)
      return usageError() << "--graph-replay: " << recordable.error().message();
  std::optional<OpenedRunnable> baseline;
  if (!flags.baseline.empty()) {
    CLEAVE_TRY(baseline, openBaseline(flags, opened.runnable));
  }
  const runtime::HarnessOptions harness{flags.repeat, flags.pipelined ? flags.microbatches : 0, flags.profile};
  CLEAVE_TRY(runtime::HarnessResult measured, runtime::timeRuns(opened.runnable, opened.acc->device(), inputs,
                                                                baseline ? &baseline->runnable : nullptr, harness));
  if (!flags.saveOutputs.empty())
    CLEAVE_CHECK(runtime::writeTensors(measured.outputs, flags.saveOutputs, opened.runnable.outputNames()));
  const report::RunSubject subject = runSubject(flags);
  out << (flags.json ? dumpJson(report::runJson(subject, measured.times)) : report::runText(subject, measured.times));
  return {};
}
} // namespace

const CommandBody kRunBody{"run", parseThenRun<RunFlags, describe, runModel>};

} // namespace cleave::cli
