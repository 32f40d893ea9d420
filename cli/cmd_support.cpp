// cli/cmd_support.cpp - `cleave support MODEL --profile P [--json] [--dot FILE]`.
#include "base/file_io.h"
#include "cli/commands.h"
#include "io/model_loader.h"
#include "report/split_report.h"

namespace cleave::cli {

int runSupport(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Which ops of a model an accelerator profile supports: per op type and input dtypes, "
               "supported or not, with counts and reasons.",
               "cleave support"};
  std::string path, profilePath, dotPath;
  bool json = false;
  app.add_option("MODEL", path, "ONNX file or FX-graph JSON")->required();
  app.add_option("--profile", profilePath, "operator-support profile (JSON)")->required();
  app.add_flag("--json", json, "machine-readable output");
  app.add_option("--dot", dotPath, "also write a Graphviz DOT of the graph, nodes coloured by support");
  if (int code = parseArguments(app, args, out, err); code >= 0)
    return code;
  Expected<support::Profile> profile = support::Profile::load(profilePath);
  if (!profile)
    return reportError("cleave support", profile.error(), err);
  Expected<ir::Graph> graph = io::loadModel(path);
  if (!graph)
    return reportError("cleave support", graph.error(), err);
  IdVector<ir::NodeId, support::Decision> decisions = support::decideAll(*graph, *profile);
  if (!dotPath.empty())
    if (Status written = writeFileAtomically(dotPath, report::supportDot(*graph, decisions)); !written)
      return reportError("cleave support", written.error(), err);
  report::Json result = report::supportJson(*graph, decisions, profile->name());
  if (json)
    out << report::dumpJson(result);
  else
    report::printSupportText(result, out);
  return kExitOk;
}

} // namespace cleave::cli
