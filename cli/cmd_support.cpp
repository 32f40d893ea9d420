// cli/cmd_support.cpp - `cleave support MODEL --profile P [--json] [--dot FILE]`.
#include "base/file_io.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "io/model_loader.h"
#include "report/split_report.h"

namespace cleave::cli {

namespace {
struct SupportFlags {
  std::string path, profilePath, dotPath;
  bool json = false;
};

void describe(CLI::App& app, SupportFlags& flags) {
  app.description("Which ops of a model an accelerator profile supports: per op type and input dtypes, supported or not, "
                  "with counts and reasons.");
  addModelInput(app, flags.path);
  addJsonFlag(app, flags.json);
  app.add_option("--profile", flags.profilePath, "operator-support profile (JSON)")->required();
  app.add_option("--dot", flags.dotPath, "also write a Graphviz DOT of the graph, nodes coloured by support");
}

Status decideSupport(const SupportFlags& flags, std::ostream& out, std::ostream&) {
  CLEAVE_TRY(support::Profile profile, support::Profile::load(flags.profilePath));
  CLEAVE_TRY(ir::Graph graph, io::loadModel(flags.path));
  IdVector<ir::NodeId, support::Decision> decisions = support::decideAll(graph, profile);
  if (!flags.dotPath.empty())
    CLEAVE_CHECK(writeFileAtomically(flags.dotPath, report::supportDot(graph, decisions)));
  Json result = report::supportJson(graph, decisions, profile.name());
  if (flags.json)
    out << dumpJson(result);
  else
    report::printSupportText(result, out);
  return {};
}
} // namespace

const Command kSupportCommand{"support", "which ops of a model an accelerator profile supports, and why not",
                              parseThenRun<SupportFlags, describe, decideSupport>};

} // namespace cleave::cli
