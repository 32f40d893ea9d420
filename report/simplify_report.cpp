#include "report/simplify_report.h"

#include <sstream>

namespace cleave::report {

FoldingReport foldingReport(const simplify::FoldPlan& plan, bool anyRows) {
  return {plan.folded,     plan.removed,       plan.constants.size(), plan.kept.size(), plan.rounds,
          plan.foldedByOp, plan.bypassedByOp, anyRows,               {},                {}};
}

namespace {
// " (Concat 2, Shape 4)"; nothing for no ops.
void writeCounts(std::ostream& out, const std::map<std::string, std::size_t>& counts) {
  if (counts.empty())
    return;
  out << " (";
  const char* separator = "";
  for (const auto& [op, count] : counts) {
    out << separator << op << " " << count;
    separator = ", ";
  }
  out << ")";
}

Json countsJson(const std::map<std::string, std::size_t>& counts) {
  Json json = Json::object();
  for (const auto& [op, count] : counts)
    json[op] = count;
  return json;
}

std::size_t total(const std::map<std::string, std::size_t>& counts) {
  std::size_t sum = 0;
  for (const auto& [op, count] : counts)
    sum += count;
  return sum;
}
} // namespace

std::string foldingText(const FoldingReport& report) {
  std::ostringstream out;
  out << "simplify: folded " << report.folded << " node(s) to constants";
  writeCounts(out, report.foldedByOp);
  if (!report.bypassedByOp.empty()) {
    out << ", bypassed " << total(report.bypassedByOp);
    writeCounts(out, report.bypassedByOp);
  }
  out << ", removed " << report.removed << ", " << report.keptNodes << " op node(s) remain, " << report.constants
      << " new initializer(s)";
  if (report.rounds > 1)
    out << ", in " << report.rounds << " rounds of shape inference";
  if (report.anyRows)
    out << "; only what holds for any batch";
  if (report.submodulesUnfolded && report.submodulesFolded)
    out << "; the cut has " << *report.submodulesFolded << " submodule(s), " << *report.submodulesUnfolded
        << " without folding";
  out << "\n";
  return out.str();
}

Json foldingJson(const FoldingReport& report) {
  Json json{{"folded_nodes", report.folded},
            {"removed_nodes", report.removed},
            {"constants", report.constants},
            {"kept_nodes", report.keptNodes},
            {"rounds", report.rounds},
            {"folded_by_op", countsJson(report.foldedByOp)},
            {"bypassed_by_op", countsJson(report.bypassedByOp)},
            {"any_batch", report.anyRows}};
  if (report.submodulesUnfolded && report.submodulesFolded) {
    json["submodules_unfolded"] = *report.submodulesUnfolded;
    json["submodules"] = *report.submodulesFolded;
  }
  return json;
}

} // namespace cleave::report
