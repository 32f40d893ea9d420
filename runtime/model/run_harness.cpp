#include "runtime/model/run_harness.h"

#include <algorithm>
#include <chrono>

#include "base/resources.h"
#include "runtime/engine/device_wing.h"
#include "runtime/engine/host_memory.h"
#include "runtime/model/microbatch.h"

namespace cleave::runtime {
namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One run: the whole input, or microbatch by microbatch through the stages (a submodule's time
// then the sum over the microbatches).
Expected<TensorMap> runOnce(Runnable& runnable, const TensorMap& inputs, std::int64_t microbatches,
                            std::vector<SubmoduleTiming>& timings, RunStats& stats) {
  if (microbatches <= 0)
    return runnable.run(inputs, &timings, &stats);
  CLEAVE_TRY(std::vector<TensorMap> chunks, splitMicrobatches(inputs, microbatches));
  std::vector<TensorMap> outs;
  for (const TensorMap& chunk : chunks) {
    std::vector<SubmoduleTiming> chunkTimings;
    CLEAVE_TRY(TensorMap part, runnable.run(chunk, &chunkTimings, &stats));
    outs.push_back(std::move(part));
    if (timings.empty())
      timings = std::move(chunkTimings);
    else
      for (std::size_t k = 0; k < timings.size() && k < chunkTimings.size(); ++k)
        timings[k].seconds += chunkTimings[k].seconds;
  }
  return mergeMicrobatches(outs);
}

// One timed run of the model into `result`: its outputs, time, statistics and memory.
Status timeRun(Runnable& runnable, at::Device device, const TensorMap& inputs, const HarnessOptions& options,
               HarnessResult& result) {
  TimedRuns& times = result.times;
  std::vector<SubmoduleTiming> these;
  times.stats = RunStats();
  times.stats.profileOps = options.profile;
  result.outputs.clear();
  resetHostMemoryPeak();
  resetDevicePeakAllocatedBytes(device);
  const auto start = std::chrono::steady_clock::now();
  CLEAVE_TRY(result.outputs, runOnce(runnable, inputs, options.microbatches, these, times.stats));
  synchronizeDevice(device); // a device's kernels may still be running
  times.lastRunSeconds = secondsSince(start);
  times.peakTensorBytes = hostMemoryStats().peakBytesInUse;
  times.peakDeviceBytes = devicePeakAllocatedBytes(device);
  times.heldWeightBytes = static_cast<std::int64_t>(wingHeldWeightBytes());
  times.seconds.push_back(times.lastRunSeconds);
  if (times.timings.empty())
    times.timings = these;
  else
    for (std::size_t k = 0; k < times.timings.size() && k < these.size(); ++k)
      times.timings[k].seconds = std::min(times.timings[k].seconds, these[k].seconds);
  return {};
}

// One timed run of the baseline on the same inputs (whole, not microbatched).
Expected<double> timeBaselineRun(Runnable& baseline, const TensorMap& inputs, at::Device device) {
  std::vector<SubmoduleTiming> timings;
  RunStats stats;
  const auto start = std::chrono::steady_clock::now();
  Expected<TensorMap> outputs = baseline.run(inputs, &timings, &stats);
  if (!outputs)
    return outputs.error().withContext("baseline");
  synchronizeDevice(device);
  return secondsSince(start);
}

void describeRunnable(const Runnable& runnable, TimedRuns& times) {
  times.submodules = runnable.submodules();
  times.modules = runnable.modules();
  if (const ReplayedRuns* replayed = runnable.replayed())
    times.replay = GraphReplaySummary{static_cast<std::int64_t>(replayed->recorded()),
                                      static_cast<std::int64_t>(replayed->refused()), replayed->refusal()};
}

} // namespace

std::vector<OutputSummary> summarizeOutputs(const TensorMap& outputs) {
  std::vector<OutputSummary> summaries;
  for (const auto& [name, tensor] : outputs)
    summaries.push_back({name, summarize(tensor),
                         tensor.is_nested() ? std::nullopt : std::optional(tensor.sizes().vec())});
  return summaries;
}

Expected<HarnessResult> timeRuns(Runnable& runnable, at::Device device, const TensorMap& inputs, Runnable* baseline,
                                 const HarnessOptions& options) {
  HarnessResult result;
  TimedRuns& times = result.times;
  for (int i = 0; i < options.repeat; ++i) {
    const bool baselineFirst = baseline && i % 2 == 1;
    double baselineSeconds = 0.0;
    if (baselineFirst) {
      CLEAVE_TRY(baselineSeconds, timeBaselineRun(*baseline, inputs, device));
    }
    CLEAVE_CHECK(timeRun(runnable, device, inputs, options, result));
    if (baseline && !baselineFirst) {
      CLEAVE_TRY(baselineSeconds, timeBaselineRun(*baseline, inputs, device));
    }
    if (baseline) {
      times.baselineSeconds.push_back(baselineSeconds);
      times.ratios.push_back(times.lastRunSeconds / baselineSeconds);
    }
  }
  for (std::vector<double>* sorted : {&times.seconds, &times.baselineSeconds, &times.ratios})
    std::sort(sorted->begin(), sorted->end());
  describeRunnable(runnable, times);
  times.outputs = summarizeOutputs(result.outputs);
  times.peakResidentBytes = peakResidentBytes();
  return result;
}

} // namespace cleave::runtime
