// report/minimize_report.h - what `cleave minimize` prints and writes to report.json: the
// candidates, the trials and each culprit node set with its outcome and error. O(culprit nodes).
#pragma once

#include <string>
#include <vector>

#include "base/json.h"
#include "runtime/model/trial_result.h"

namespace cleave::report {

struct MinimizeRun {
  std::string backendA, backendB;
  runtime::MinimizeMode mode = runtime::MinimizeMode::Binary;
  std::size_t candidates = 0;
  runtime::MinimizeResult result;
};

Json minimizeReportJson(const ir::Graph& graph, const MinimizeRun& run);
std::string minimizeReportText(const ir::Graph& graph, const MinimizeRun& run);

} // namespace cleave::report
