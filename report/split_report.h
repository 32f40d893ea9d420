// report/split_report.h - what `cleave support` and `cleave split` print and write.
// Guarantee: text and JSON render the same typed results. Complexity: linear in the graph plus
// sorting the grouped CPU reasons.
#pragma once

#include <ostream>
#include <string>

#include "plan/materialize.h"
#include "base/json.h"
#include "report/simplify_report.h"
#include "split/preview.h"
#include "split/shape_prologue.h"
#include "split/splitter.h"
#include "support/profile.h"

namespace cleave::report {

// ----- cleave support -----
Json supportJson(const ir::Graph& graph, const IdVector<ir::NodeId, support::Decision>& decisions,
                 const std::string& profileName);
void printSupportText(const Json& support, std::ostream& out);
// --segments: what each op type left on the CPU costs the split (split::segmentCostByOp), as
// JSON, and the text printed from it.
Json segmentCostJson(const std::vector<split::OpSegmentCost>& costs);
void printSegmentCosts(const Json& segments, std::ostream& out);
// Graphviz DOT: supported callable nodes green, unsupported red, the rest grey.
std::string supportDot(const ir::Graph& graph, const IdVector<ir::NodeId, support::Decision>& decisions);

// ----- cleave split -----
// A submodule tried on the accelerator backend (--preview --backend), as the runtime reported it.
struct SubmoduleTrialLine {
  std::string submodule, outcome, message; // message: empty when it passed
  double maxAbs = 0.0, maxRel = 0.0, maxScaled = 0.0; // runtime::TrialResult's
  std::string culpritNode, culpritOp, culpritOutcome, culpritMessage; // culpritNode empty: none
};
struct SplitReport {
  const split::SplitResult& result;
  const split::SplitPreview& preview;
  std::string trialBackend; // empty: no lower-and-run section
  std::vector<SubmoduleTrialLine> trials;
  const FoldingReport* folding = nullptr; // what folding did before the split (null: nothing)
  const split::ShapePrologue* prologue = nullptr; // shape arithmetic kept with acc submodules
  std::size_t submodulesWithoutPrologue = 0;       // the same cut's submodules without it
};
// report.json / --json. CPU nodes come twice: grouped by (op, reason) with a count and an
// example, then one by one with the rule behind each.
std::string splitReportJson(const ir::Graph& graph, const SplitReport& report); // dumpJson's text
// Graphviz DOT of the cut: one box per submodule (acc green, cpu grey) holding its nodes, CPU
// nodes labelled with their reason, edges between the graph's nodes. Deterministic; O(V + E).
std::string splitDot(const ir::Graph& graph, const plan::CutPlan& plan);
// The text report; `preview` adds every submodule's seam bytes and the PCIe bound.
std::string splitReportText(const ir::Graph& graph, const SplitReport& report, bool preview);

} // namespace cleave::report
