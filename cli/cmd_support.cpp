// cli/cmd_support.cpp - `cleave support MODEL --profile P [--json] [--dot FILE]`.
#include "base/file_io.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "io/model_loader.h"
#include "report/split_report.h"

namespace cleave::cli {

int runSupport(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Which ops of a model an accelerator profile supports: per op type and input dtypes, "
               "supported or not, with counts and reasons.",
               "cleave support"};
  std::string path, profilePath, dotPath;
  bool json = false;
  addModelInput(app, path);
  app.add_option("--profile", profilePath, "operator-support profile (JSON)")->required();
  addJsonFlag(app, json);
  app.add_option("--dot", dotPath, "also write a Graphviz DOT of the graph, nodes coloured by support");
  return runCommand(app, args, out, err, [&]() -> Status {
    CLEAVE_TRY(support::Profile profile, support::Profile::load(profilePath));
    CLEAVE_TRY(ir::Graph graph, io::loadModel(path));
    IdVector<ir::NodeId, support::Decision> decisions = support::decideAll(graph, profile);
    if (!dotPath.empty())
      CLEAVE_CHECK(writeFileAtomically(dotPath, report::supportDot(graph, decisions)));
    Json result = report::supportJson(graph, decisions, profile.name());
    if (json)
      out << dumpJson(result);
    else
      report::printSupportText(result, out);
    return {};
  });
}

} // namespace cleave::cli
