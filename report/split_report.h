// report/split_report.h - what `cleave support` and `cleave split` print and write.
#pragma once

#include <ostream>
#include <string>

#include "plan/materialize.h"
#include "base/json.h"
#include "split/splitter.h"
#include "support/profile.h"

namespace cleave::report {

// ----- cleave support -----
Json supportJson(const ir::Graph& graph, const IdVector<ir::NodeId, support::Decision>& decisions,
                 const std::string& profileName);
void printSupportText(const Json& support, std::ostream& out);
// Graphviz DOT: supported callable nodes green, unsupported red, the rest grey.
std::string supportDot(const ir::Graph& graph, const IdVector<ir::NodeId, support::Decision>& decisions);

// ----- cleave split -----
struct SplitReportOptions {
  double pcieBytesPerSecond = 100.0 * (1ull << 30); // the reference's PCIe_BW
};
Json splitJson(const ir::Graph& graph, const split::SplitResult& result,
               const std::vector<plan::Boundary>& boundaries, const SplitReportOptions& options);
void printSplitText(const Json& split, bool preview, std::ostream& out);

} // namespace cleave::report
