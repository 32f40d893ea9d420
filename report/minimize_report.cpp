#include "report/minimize_report.h"

#include <sstream>

namespace cleave::report {

Json minimizeReportJson(const ir::Graph& graph, const MinimizeRun& run) {
  Json summary;
  summary["mode"] = std::string(runtime::kMinimizeModes.name(run.mode));
  summary["backend_a"] = run.backendA;
  summary["backend_b"] = run.backendB;
  summary["candidates"] = run.candidates;
  summary["trials"] = run.result.trials;
  summary["all_candidates_fail"] = run.result.wholeFails;
  Json culprits = Json::array();
  for (const runtime::Culprit& culprit : run.result.culprits) {
    Json names = Json::array();
    for (ir::NodeId node : culprit.nodes)
      names.push_back(std::string(graph.name(node)));
    culprits.push_back({{"nodes", std::move(names)},
                        {"outcome", runtime::trialOutcomeName(culprit.result.outcome)},
                        {"message", culprit.result.message},
                        {"max_abs", culprit.result.maxAbs},
                        {"max_rel", culprit.result.maxRel},
                        {"max_scaled", culprit.result.maxScaled}});
  }
  summary["culprits"] = std::move(culprits);
  return summary;
}

std::string minimizeReportText(const ir::Graph& graph, const MinimizeRun& run) {
  std::ostringstream text;
  text << "candidates: " << run.candidates << " node(s) the profile supports; " << run.result.trials << " trial(s)\n";
  if (run.result.culprits.empty())
    text << "no culprit: " << run.backendB << " agrees with " << run.backendA << " on every tried set\n";
  for (const runtime::Culprit& culprit : run.result.culprits) {
    text << "culprit (" << runtime::trialOutcomeName(culprit.result.outcome) << "):";
    for (ir::NodeId node : culprit.nodes)
      text << " " << graph.name(node) << " (" << graph.target(node) << ")";
    text << "\n  " << culprit.result.message << "\n";
  }
  return text.str();
}

} // namespace cleave::report
