// runtime/model/run_harness.h - a model timed as `cleave run --repeat N` times it: N runs (whole,
// or microbatch by microbatch through a cut's stages), each waited for on its device, keeping each
// run's seconds, every submodule's fastest time and the last run's statistics, outputs and memory;
// with a baseline, N pairs, the baseline first in every other pair so that neither side always
// runs on the caches the other left, and the ratio of each pair.
// Guarantees: both sides of a pair gather the same per-submodule timings and statistics (neither
// pays for bookkeeping the other skips); a pair's baseline outputs are dropped before the next run;
// the previous run's outputs are dropped before a run (they are not its memory).
// Complexity: N runs (2N with a baseline) plus O(outputs) to summarize the last one.
#pragma once

#include <cstdint>

#include "base/expected.h"
#include "runtime/engine/tensors.h"
#include "runtime/model/run_times.h"
#include "runtime/model/runnable.h"

namespace cleave::runtime {

struct HarnessOptions {
  int repeat = 1;
  // A cut run microbatch by microbatch through its stages (`cleave run --pipeline`), in this many
  // microbatches; 0: the whole input at once.
  std::int64_t microbatches = 0;
  bool profile = false; // time every kernel (RunStats::profileOps)
};

struct HarnessResult {
  TensorMap outputs; // the last run's
  TimedRuns times;
};

// Times `runnable` on `device` (its accelerator's; the CPU's where it has none). `baseline`
// (optional) runs the same inputs whole. Fails: what a run fails with (the baseline's in context).
Expected<HarnessResult> timeRuns(Runnable& runnable, at::Device device, const TensorMap& inputs, Runnable* baseline,
                                 const HarnessOptions& options);

// Each output's summary and shape, by name.
std::vector<OutputSummary> summarizeOutputs(const TensorMap& outputs);

} // namespace cleave::runtime
