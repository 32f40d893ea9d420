// cli/cmd_run.cpp - `cleave run MODEL|OUT_DIR [--inputs FILE | --random --seed S] [--repeat N [--baseline OTHER
// [--baseline-options FLAGS]]] [--pipeline | --distributed [--schedule S]] [--microbatches M] [--graph-replay]
// [--inputs-on-device]`.
#include <algorithm>
#include <map>
#include <sstream>

#include "base/json.h"
#include "base/resources.h"
#include "cli/commands.h"
#include "cli/runtime_library.h"
#include "cli/options.h"
#include "cli/runtime_inputs.h"
#include "plan/plan_file.h"
#include "runtime/distributed/distributed_run.h"
#include "runtime/distributed/environment.h"
#include "runtime/engine/device_wing.h"
#include "runtime/engine/kernel.h"
#include "runtime/model/wing_library.h"
#include "runtime/engine/host_memory.h"
#include "runtime/model/microbatch.h"
#include "plan/fixed_batch_check.h"
#include "runtime/model/tensor_files.h"

namespace cleave::cli {
namespace {
constexpr std::size_t kSlowestNodes = 10; // how many nodes --profile lists

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
               "on the host) runs as usual, and --json says why")
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

struct RunMeasurements {
  runtime::TensorMap outputs;
  std::vector<double> seconds; // per run, sorted
  double lastRunSeconds = 0.0; // the run whose stats are kept
  std::vector<runtime::SubmoduleTiming> timings; // per submodule: the fastest run
  runtime::RunStats stats; // of the last run
  std::int64_t peakTensorBytes = 0; // ATen's bytes in use at the last run's peak (runtime/engine/host_memory.h)
  std::size_t heldWeightBytes = 0;   // the wings' own weight copies after the last run (oneDNN's on the CPU)
  // The accelerator backend's device, and its allocator's peak in the last run (-1 where its wing
  // does not count: the CPU's bytes are peakTensorBytes).
  at::Device device = at::kCPU;
  std::int64_t peakDeviceBytes = -1;
  std::vector<double> baselineSeconds; // --baseline: its run of each pair, sorted
  std::vector<double> ratios;          // --baseline: this run / the baseline's run, per pair, sorted
};

// One run: the whole input, or (--pipeline) microbatch by microbatch through the stages.
Expected<runtime::TensorMap> runOnce(const RunFlags& flags, runtime::Runnable& runnable,
                                     const runtime::TensorMap& inputs, std::vector<runtime::SubmoduleTiming>& timings,
                                     runtime::RunStats& stats) {
  if (!flags.pipelined)
    return runnable.run(inputs, &timings, &stats);
  CLEAVE_TRY(std::vector<runtime::TensorMap> chunks, runtime::splitMicrobatches(inputs, flags.microbatches));
  std::vector<runtime::TensorMap> outs;
  for (const runtime::TensorMap& chunk : chunks) {
    CLEAVE_TRY(runtime::TensorMap part, runnable.run(chunk, &timings, &stats));
    outs.push_back(std::move(part));
  }
  return runtime::mergeMicrobatches(outs);
}

// One timed run of the model into `measured`: its outputs, time, statistics and memory.
Status timeRun(const RunFlags& flags, runtime::Runnable& runnable, const runtime::TensorMap& inputs,
               RunMeasurements& measured) {
  std::vector<runtime::SubmoduleTiming> these;
  measured.stats = runtime::RunStats();
  measured.stats.profileOps = flags.profile;
  measured.outputs.clear(); // the previous run's outputs are not this run's memory
  runtime::resetHostMemoryPeak();
  runtime::resetDevicePeakAllocatedBytes(measured.device);
  auto start = std::chrono::steady_clock::now();
  CLEAVE_TRY(measured.outputs, runOnce(flags, runnable, inputs, these, measured.stats));
  runtime::synchronizeDevice(measured.device); // a device's kernels may still be running
  measured.lastRunSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  measured.peakTensorBytes = runtime::hostMemoryStats().peakBytesInUse;
  measured.peakDeviceBytes = runtime::devicePeakAllocatedBytes(measured.device);
  measured.heldWeightBytes = runtime::wingHeldWeightBytes();
  measured.seconds.push_back(measured.lastRunSeconds);
  if (measured.timings.empty())
    measured.timings = these;
  else
    for (std::size_t k = 0; k < measured.timings.size() && k < these.size(); ++k)
      measured.timings[k].seconds = std::min(measured.timings[k].seconds, these[k].seconds);
  return {};
}

// One timed run of the baseline on the same inputs (whole, not microbatched), gathering the same
// per-submodule timings and statistics as the model's runs do, so that neither side pays for
// bookkeeping the other skips; its outputs are dropped before the next run.
Expected<double> timeBaselineRun(runtime::Runnable& baseline, const runtime::TensorMap& inputs, at::Device device) {
  std::vector<runtime::SubmoduleTiming> timings;
  runtime::RunStats stats;
  auto start = std::chrono::steady_clock::now();
  Expected<runtime::TensorMap> outputs = baseline.run(inputs, &timings, &stats);
  if (!outputs)
    return outputs.error().withContext("baseline");
  runtime::synchronizeDevice(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `--repeat` runs; with a baseline, `--repeat` pairs, the baseline first in every other pair so
// that neither side always runs on the caches the other left.
Expected<RunMeasurements> runRepeatedly(const RunFlags& flags, runtime::Runnable& runnable, at::Device device,
                                        const runtime::TensorMap& inputs, runtime::Runnable* baseline) {
  RunMeasurements measured;
  measured.device = device;
  for (int i = 0; i < flags.repeat; ++i) {
    const bool baselineFirst = baseline && i % 2 == 1;
    double baselineSeconds = 0.0;
    if (baselineFirst) {
      CLEAVE_TRY(baselineSeconds, timeBaselineRun(*baseline, inputs, device));
    }
    CLEAVE_CHECK(timeRun(flags, runnable, inputs, measured));
    if (baseline && !baselineFirst) {
      CLEAVE_TRY(baselineSeconds, timeBaselineRun(*baseline, inputs, device));
    }
    if (baseline) {
      measured.baselineSeconds.push_back(baselineSeconds);
      measured.ratios.push_back(measured.lastRunSeconds / baselineSeconds);
    }
  }
  std::sort(measured.seconds.begin(), measured.seconds.end());
  std::sort(measured.baselineSeconds.begin(), measured.baselineSeconds.end());
  std::sort(measured.ratios.begin(), measured.ratios.end());
  return measured;
}

// The last run's time outside its kernels: the executor's own work between them, moving inputs
// and outputs, and the timing itself (with --profile).
double outsideKernelsSeconds(const RunMeasurements& measured) {
  double kernels = 0.0;
  for (const auto& [op, seconds] : measured.stats.secondsByOp)
    kernels += seconds;
  return measured.lastRunSeconds - kernels;
}

// Entries by time, largest first (ties by name), at most `limit`.
std::vector<std::pair<std::string, double>> slowestFirst(const std::map<std::string, double>& seconds,
                                                         std::size_t limit) {
  std::vector<std::pair<std::string, double>> sorted(seconds.begin(), seconds.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  sorted.resize(std::min(sorted.size(), limit));
  return sorted;
}

// --baseline's report: its run times and the quantiles of the per-pair ratios.
struct PairedSummary {
  double baselineMedian, baselineMin;
  double median, p25, p75, min, max; // of this run / the baseline's, per pair
};

PairedSummary summarizePairs(const RunMeasurements& measured) {
  const std::vector<double>& base = measured.baselineSeconds;
  const std::vector<double>& ratios = measured.ratios; // sorted
  return {base[base.size() / 2],         base.front(),  ratios[ratios.size() / 2], ratios[ratios.size() / 4],
          ratios[ratios.size() * 3 / 4], ratios.front(), ratios.back()};
}

Json runJson(const RunFlags& flags, const runtime::Runnable& runnable, const RunMeasurements& measured) {
  Json summary;
  summary["model"] = flags.path;
  summary["submodules"] = runnable.submodules();
  summary["modules"] = runnable.modules(); // fewer when a cut's seams are joined
  if (flags.pipelined)
    summary["microbatches"] = flags.microbatches;
  for (const auto& [name, tensor] : measured.outputs) {
    at::Tensor cpu = tensor.to(at::kCPU);
    summary["outputs"][name] = {{"summary", runtime::summarize(cpu)}, {"shape", cpu.sizes().vec()}};
  }
  const std::vector<double>& seconds = measured.seconds;
  summary["timing"] = {{"runs", flags.repeat}, {"min_s", seconds.front()}, {"median_s", seconds[seconds.size() / 2]}};
  Json steps = Json::array();
  for (const runtime::SubmoduleTiming& timing : measured.timings)
    steps.push_back({{"name", timing.name}, {"backend", timing.backend}, {"min_s", timing.seconds}});
  summary["timing"]["steps"] = std::move(steps);
  if (const runtime::ReplayedRuns* replayed = runnable.replayed()) {
    summary["graph_replay"] = {{"recorded", replayed->recorded()}, {"refused", replayed->refused()}};
    if (!replayed->refusal().empty())
      summary["graph_replay"]["refusal"] = replayed->refusal();
  }
  if (!flags.baseline.empty()) {
    const PairedSummary pairs = summarizePairs(measured);
    summary["baseline"] = {{"model", flags.baseline},
                           {"min_s", pairs.baselineMin},
                           {"median_s", pairs.baselineMedian},
                           {"ratio",
                            {{"median", pairs.median},
                             {"p25", pairs.p25},
                             {"p75", pairs.p75},
                             {"min", pairs.min},
                             {"max", pairs.max}}}};
  }
  if (flags.profile) {
    for (const auto& [op, s] : slowestFirst(measured.stats.secondsByOp, SIZE_MAX))
      summary["profile"].push_back({{"op", op}, {"seconds", s}});
    // Every timed node too, so a tool can line them up with another runtime's profile.
    for (const auto& [node, s] : slowestFirst(measured.stats.secondsByNode, SIZE_MAX)) {
      if (summary["node_seconds"].size() < kSlowestNodes)
        summary["slowest_nodes"].push_back({{"node", node}, {"seconds", s}});
      summary["node_seconds"].push_back({{"node", node}, {"seconds", s}});
    }
    summary["last_run_s"] = measured.lastRunSeconds;
    summary["outside_kernels_s"] = outsideKernelsSeconds(measured);
    summary["peak_activation_bytes"] = measured.stats.peakActivationBytes;
    summary["peak_tensor_bytes"] = measured.peakTensorBytes;
    summary["onednn_weight_bytes"] = measured.heldWeightBytes;
    summary["peak_resident_bytes"] = peakResidentBytes();
    if (measured.peakDeviceBytes >= 0)
      summary["peak_device_bytes"] = measured.peakDeviceBytes;
    summary["host_device_copies"] = measured.stats.hostDeviceCopies;
    summary["host_device_copy_bytes"] = measured.stats.hostDeviceCopyBytes;
    summary["seam_copies"] = measured.stats.seamCopies;
    summary["seam_copy_bytes"] = measured.stats.seamCopyBytes;
    summary["seam_copy_s"] = measured.stats.seamCopySeconds;
  }
  return summary;
}

std::string runText(const RunFlags& flags, const runtime::Runnable& runnable, const RunMeasurements& measured) {
  std::ostringstream text;
  if (const runtime::ReplayedRuns* replayed = runnable.replayed()) {
    text << "graph replay: " << replayed->recorded() << " input shape(s) recorded and replayed, " << replayed->refused()
         << " run as usual";
    if (!replayed->refusal().empty())
      text << " (" << replayed->refusal() << ")";
    text << "\n";
  }
  for (const auto& [name, tensor] : measured.outputs)
    text << name << ": " << runtime::summarize(tensor) << "\n";
  const std::vector<double>& seconds = measured.seconds;
  text << "time: median " << seconds[seconds.size() / 2] * 1e3 << " ms, min " << seconds.front() * 1e3 << " ms over "
       << flags.repeat << " run(s)\n";
  if (!flags.baseline.empty()) {
    const PairedSummary pairs = summarizePairs(measured);
    text << "baseline " << flags.baseline << ": median " << pairs.baselineMedian * 1e3 << " ms, min "
         << pairs.baselineMin * 1e3 << " ms\n";
    text << "this / baseline over " << measured.ratios.size() << " pair(s): median " << pairs.median
         << ", middle half [" << pairs.p25 << ", " << pairs.p75 << "], range [" << pairs.min << ", " << pairs.max
         << "]\n";
  }
  if (flags.profile) {
    text << "kernel time by op (last run):\n";
    for (const auto& [op, s] : slowestFirst(measured.stats.secondsByOp, SIZE_MAX))
      text << "  " << op << ": " << s * 1e3 << " ms\n";
    text << "outside kernels (last run: the executor between them, inputs and outputs, the timing): "
         << outsideKernelsSeconds(measured) * 1e3 << " ms of " << measured.lastRunSeconds * 1e3 << " ms\n";
    text << "peak live activations (last run" << (measured.timings.size() > 1 ? ", largest submodel" : "")
         << "): " << measured.stats.peakActivationBytes << " bytes\n";
    text << "peak tensor memory (last run: parameters not held only for oneDNN, inputs, activations and ATen's "
            "workspaces): "
         << measured.peakTensorBytes << " bytes\n";
    text << "weights held for oneDNN (packed or reordered copies, beside the tensors above): "
         << measured.heldWeightBytes << " bytes\n";
    text << "peak resident set of the process (loading and every run, libraries included): "
         << peakResidentBytes() / (1024 * 1024) << " MiB\n";
    if (measured.peakDeviceBytes >= 0)
      text << "peak device memory (last run: the device allocator's bytes, parameters included): "
           << measured.peakDeviceBytes << " bytes\n";
    text << "copies between host and device memory (last run; none where they share it, as on the CPU): "
         << measured.stats.hostDeviceCopies << ", " << measured.stats.hostDeviceCopyBytes << " bytes\n";
    if (measured.stats.seamCopies > 0)
      text << "copies between submodules on different devices (last run; what split --preview predicts): "
           << measured.stats.seamCopies << ", " << measured.stats.seamCopyBytes << " bytes, "
           << measured.stats.seamCopySeconds * 1e3 << " ms\n";
    text << "slowest nodes (last run):\n";
    for (const auto& [node, s] : slowestFirst(measured.stats.secondsByNode, kSlowestNodes))
      text << "  " << node << ": " << s * 1e3 << " ms\n";
  }
  if (measured.timings.size() > 1)
    for (const runtime::SubmoduleTiming& timing : measured.timings)
      text << "  " << timing.name << " (" << timing.backend << "): " << timing.seconds * 1e3 << " ms\n";
  return text.str();
}

// A static-batch export whose constants hold the batch would fail deep inside the first run of
// other rows: refused in one line, from the plan the model was loaded with.
Status checkMicrobatchRows(const RunFlags& flags, const plan::PlanFile& plan) {
  if (flags.microbatches <= 1)
    return {};
  return plan::checkRowsCanChange(flags.path, plan, std::to_string(flags.microbatches) + " microbatches");
}

// --distributed: this rank's part of the plan; rank 0 reports like a single-process run.
Status runDistributed(const RunFlags& flags, std::ostream& out, std::ostream& err) {
  CLEAVE_TRY(runtime::distributed::DistributedEnv env, runtime::distributed::readDistributedEnv());
  if (flags.schedule && pipeline::placementOf(*flags.schedule) != pipeline::Placement::Loop)
    return usageError() << "--schedule " << pipeline::kScheduleKinds.name(*flags.schedule)
                        << " is a training schedule (two stages per rank in a V, for the backward's sake); a forward "
                           "runs under gpipe, 1f1b, interleaved or looped_bfs";
  // Each rank on its own GPU, by the rule training follows (the wing loaded before ATen is asked).
  CLEAVE_CHECK(runtime::loadBackendWing(flags.runtime.backend));
  CLEAVE_TRY(auto acc, runtime::makeBackend(runtime::distributed::rankBackend(flags.runtime.backend, &env),
                                            flags.runtime.optimizations));
  CLEAVE_TRY(auto cpu, runtime::makeBackend("aten-cpu", flags.runtime.optimizations));
  CLEAVE_TRY(runtime::CutModel model, runtime::distributed::loadRankModel(flags.path, env.rank, env.worldSize, *acc, *cpu));
  CLEAVE_CHECK(checkMicrobatchRows(flags, model.plan().file()));
  runtime::TensorMap inputs;
  if (!flags.runtime.inputsPath.empty()) {
    CLEAVE_TRY(inputs, runtime::readTensors(flags.runtime.inputsPath, model.graphInputs()));
  } else {
    CLEAVE_TRY(auto dims, parseDims(flags.runtime.dims));
    CLEAVE_TRY(inputs, model.randomInputs(flags.runtime.seed, dims));
  }
  std::optional<pipeline::Schedule> schedule;
  if (flags.schedule) {
    CLEAVE_TRY(schedule, rankSchedule(*flags.schedule, model.size(), flags.microbatches, env.worldSize));
  }
  const runtime::distributed::PlanShapes shapes(model.plan().file().values);
  CLEAVE_TRY(auto comm, runtime::distributed::Communicator::connect(env));
  const std::size_t headersBefore = comm->headersSent();
  auto start = std::chrono::steady_clock::now();
  CLEAVE_TRY(runtime::distributed::DistributedRunResult result,
             runtime::distributed::runDistributed(model, inputs, flags.microbatches, *comm,
                                                  schedule ? &*schedule : nullptr, &shapes));
  const std::size_t headers = comm->headersSent() - headersBefore;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  err << "rank " << env.rank << " of " << env.worldSize << ": ran";
  for (const std::string& step : result.ownSteps)
    err << " " << step;
  err << " over " << flags.microbatches << " microbatch(es) in " << seconds * 1e3 << " ms (" << headers
      << " shape header(s) sent)\n";
  if (env.rank != 0)
    return {};
  if (!flags.saveOutputs.empty())
    CLEAVE_CHECK(runtime::writeTensors(result.outputs, flags.saveOutputs, model.graphOutputs()));
  Json summary = {{"model", flags.path}, {"ranks", env.worldSize}, {"microbatches", flags.microbatches},
                  {"seconds", seconds}};
  std::ostringstream text;
  for (const auto& [name, tensor] : result.outputs) {
    summary["outputs"][name] = {{"summary", runtime::summarize(tensor)}, {"shape", tensor.sizes().vec()}};
    text << name << ": " << runtime::summarize(tensor) << "\n";
  }
  out << (flags.json ? dumpJson(summary) : text.str());
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
  if (flags.pipelined)
    CLEAVE_CHECK(checkMicrobatchRows(flags, opened.runnable.cut()->plan().file()));
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
  CLEAVE_TRY(RunMeasurements measured,
             runRepeatedly(flags, opened.runnable, opened.acc->device(), inputs,
                           baseline ? &baseline->runnable : nullptr));
  if (!flags.saveOutputs.empty())
    CLEAVE_CHECK(runtime::writeTensors(measured.outputs, flags.saveOutputs, opened.runnable.outputNames()));
  out << (flags.json ? dumpJson(runJson(flags, opened.runnable, measured)) : runText(flags, opened.runnable, measured));
  return {};
}
} // namespace

const CommandBody kRunBody{"run", parseThenRun<RunFlags, describe, runModel>};

} // namespace cleave::cli
