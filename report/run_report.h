// report/run_report.h - what `cleave run` prints (text, or one JSON object with --json), rendered
// from the runtime's torch-free records (runtime/model/run_times.h): the outputs, the runs' times,
// a baseline's paired ratios, --profile's kernel time by op and node, memory and copies; and a
// distributed rank's line and rank 0's outputs.
// Guarantees: rendering only (nothing measured here); ties in the slowest lists break by name.
// Complexity: O(outputs + submodules + ops log ops + nodes log nodes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/json.h"
#include "runtime/model/run_times.h"

namespace cleave::report {

// What the runs were of, as the command line named them.
struct RunSubject {
  std::string model;
  std::string baseline;                      // "" none
  int repeat = 1;
  std::optional<std::int64_t> microbatches;  // --pipeline's
  bool profile = false;
};

Json runJson(const RunSubject& subject, const runtime::TimedRuns& times);
std::string runText(const RunSubject& subject, const runtime::TimedRuns& times);

// "rank 1 of 2: ran stage_1 over 4 microbatch(es) in 12.5 ms (0 shape header(s) sent)\n"
std::string rankRunLine(const runtime::RankRun& run);
// Rank 0's outputs (text), or the run's summary (JSON).
Json rankRunJson(const std::string& model, const runtime::RankRun& run);
std::string rankRunText(const runtime::RankRun& run);

} // namespace cleave::report
