// runtime/model/run_times.h - what `cleave run` measured of a model's repeated runs (run_harness.h
// fills it), as a torch-free record that report/run_report.h renders: each run's seconds, every
// submodule's fastest time, the last run's statistics, outputs and memory, and with a baseline the
// paired ratios. Also a distributed rank's run (runtime/distributed/rank_run.h).
// Guarantees: plain values; `seconds`, `baselineSeconds` and `ratios` are sorted ascending.
// Complexity: O(runs + submodules + outputs) to copy, plus the statistics' maps.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine/run_stats.h"

namespace cleave::runtime {

// One output as a run prints it: its name, a summary of its values and its shape.
struct OutputSummary {
  std::string name, summary;
  std::optional<std::vector<std::int64_t>> shape; // none for a sequence (its tensors' shapes differ)
};

// A device wing's recorded replays (runnable.h: --graph-replay).
struct GraphReplaySummary {
  std::int64_t recorded = 0, refused = 0;
  std::string refusal; // why a shape was refused ("" none)
};

struct TimedRuns {
  std::size_t submodules = 1, modules = 1; // a cut's, and the modules a run runs (joined seams: fewer)
  std::optional<GraphReplaySummary> replay;
  std::vector<OutputSummary> outputs; // the last run's
  std::vector<double> seconds;        // per run, sorted
  double lastRunSeconds = 0.0;        // the run whose statistics are kept
  std::vector<SubmoduleTiming> timings; // per submodule: the fastest run
  RunStats stats;                       // of the last run
  std::int64_t peakTensorBytes = 0;     // ATen's bytes in use at the last run's peak (host_memory.h)
  std::int64_t heldWeightBytes = 0;     // the wings' own weight copies after the last run (oneDNN's)
  std::int64_t peakDeviceBytes = -1;    // the device allocator's peak in the last run (-1: not counted)
  std::int64_t peakResidentBytes = 0;   // the process's, after every run
  std::vector<double> baselineSeconds;  // with a baseline: its run of each pair, sorted
  std::vector<double> ratios;           // with a baseline: this run / the baseline's, per pair, sorted
};

// One rank's part of a distributed run (rank_run.h): what it ran, and rank 0's outputs.
struct RankRun {
  int rank = 0, ranks = 1;
  std::int64_t microbatches = 1;
  std::vector<std::string> ownSteps; // the submodules this rank ran
  double seconds = 0.0;
  std::int64_t shapeHeaders = 0;      // messages that carried a shape header
  std::vector<OutputSummary> outputs; // rank 0's
};

} // namespace cleave::runtime
