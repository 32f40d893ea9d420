// cli/cmd_gen.cpp - `cleave gen FAMILY N -o FILE.onnx`.
#include "cli/commands.h"
#include "gen/families.h"
#include "io/onnx.h"

namespace cleave::cli {

int runGen(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Write a synthetic ONNX model of a graph family (the families of "
               "shared/bench/reference/graphs.py, plus a transformer stack).",
               "cleave gen"};
  std::string family, output;
  std::int64_t n = 0, externalThreshold = 0;
  bool list = false;
  gen::FamilyOptions options;
  app.add_option("FAMILY", family, "chain | wide | linear_chain | diamonds | transformer");
  app.add_option("N", n, "size: blocks, branches, layers or diamonds");
  app.add_option("-o,--output", output, "the .onnx file to write");
  app.add_option("--width", options.width, "hidden width (0: the family's default)");
  app.add_option("--batch", options.batch, "batch size (0: the family's default)");
  app.add_option("--heads", options.heads, "attention heads (transformer)");
  app.add_option("--seq", options.sequence, "sequence length (transformer)");
  app.add_option("--seed", options.seed, "seed of the random weights");
  app.add_option("--external-data", externalThreshold,
                 "write parameters of at least this many bytes to FILE.data (0: inline)");
  app.add_flag("--list", list, "list the families and exit");
  if (int code = parseArguments(app, args, out, err); code >= 0)
    return code;
  if (list) {
    for (const gen::FamilyInfo& info : gen::listFamilies())
      out << info.name << ": " << info.description << "\n";
    return kExitOk;
  }
  if (family.empty() || n == 0 || output.empty()) {
    err << "cleave gen: usage error: FAMILY, N and -o FILE are required (see --help)\n";
    return kExitUsage;
  }
  Expected<ir::Graph> graph = gen::generateFamily(family, n, options);
  if (!graph)
    return reportError("cleave gen", graph.error(), err);
  if (Status written = io::writeOnnx(*graph, output, {.externalDataThreshold = externalThreshold}); !written)
    return reportError("cleave gen", written.error(), err);
  err << "cleave gen: wrote " << output << " (" << graph->numNodes() << " nodes)\n";
  return kExitOk;
}

} // namespace cleave::cli
