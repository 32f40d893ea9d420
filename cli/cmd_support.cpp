// cli/cmd_support.cpp - `cleave support MODEL --profile P [--json] [--dot FILE] [--segments]`: the
// profile's decision for every node of the model split would plan on (ONNX folded first, as split
// does, cli/planning_model.h), and with --segments what each unsupported op costs the split.
#include "base/file_io.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/planning_model.h"
#include "report/split_report.h"
#include "split/preview.h"

namespace cleave::cli {

namespace {
struct SupportFlags {
  std::string path, profilePath, dotPath;
  bool json = false, segments = false, noSimplify = false;
};

void describe(CLI::App& app, SupportFlags& flags) {
  app.description("Which ops of a model an accelerator profile supports: per op type and input dtypes, supported or not, "
                  "with counts and reasons.");
  addModelInput(app, flags.path);
  addJsonFlag(app, flags.json);
  app.add_option("--profile", flags.profilePath, "operator-support profile (JSON)")->required();
  app.add_option("--dot", flags.dotPath, "also write a Graphviz DOT of the graph, nodes coloured by support");
  app.add_flag("--segments", flags.segments,
               "also say, per op type left on the CPU, how many submodules split (default options) would have if the "
               "accelerator took it: the ops that cost the most segments first");
  addSimplifyFlag(app, flags.noSimplify);
}

Status decideSupport(const SupportFlags& flags, std::ostream& out, std::ostream&) {
  CLEAVE_TRY(support::Profile profile, support::Profile::load(flags.profilePath));
  CLEAVE_TRY(PlanningModel model, loadPlanningModel(flags.path, {.simplify = !flags.noSimplify}));
  const ir::Graph& graph = model.graph;
  IdVector<ir::NodeId, support::Decision> decisions = support::decideAll(graph, profile);
  if (!flags.dotPath.empty())
    CLEAVE_CHECK(writeFileAtomically(flags.dotPath, report::supportDot(graph, decisions)));
  Json result = report::supportJson(graph, decisions, profile.name());
  if (model.folding)
    result["simplify"] = report::foldingJson(*model.folding);
  if (flags.segments) {
    CLEAVE_TRY(std::vector<split::OpSegmentCost> costs, split::segmentCostByOp(graph, decisions, {}));
    result["segments"] = report::segmentCostJson(costs);
  }
  if (flags.json) {
    out << dumpJson(result);
    return {};
  }
  out << withFoldingLine(model, "");
  report::printSupportText(result, out);
  if (flags.segments)
    report::printSegmentCosts(result["segments"], out);
  return {};
}
} // namespace

const Command kSupportCommand{"support", "which ops of a model an accelerator profile supports, and why not",
                              parseThenRun<SupportFlags, describe, decideSupport>};

} // namespace cleave::cli
