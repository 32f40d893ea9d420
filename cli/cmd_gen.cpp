// cli/cmd_gen.cpp - `cleave gen FAMILY N -o FILE.onnx`.
#include "cli/commands.h"
#include "gen/families.h"
#include "io/onnx.h"

namespace cleave::cli {

namespace {
struct GenFlags {
  std::string family, output;
  std::int64_t n = 0, externalThreshold = 0;
  bool list = false;
  gen::FamilyOptions options;
};

void describe(CLI::App& app, GenFlags& flags) {
  app.description("Write a synthetic ONNX model of a graph family (the families of "
                  "shared/bench/reference/graphs.py, plus a transformer stack).");
  app.add_option("FAMILY", flags.family, "chain | wide | linear_chain | diamonds | transformer");
  app.add_option("N", flags.n, "size: blocks, branches, layers or diamonds");
  app.add_option("-o,--output", flags.output, "the .onnx file to write");
  app.add_option("--width", flags.options.width, "hidden width (0: the family's default)");
  app.add_option("--batch", flags.options.batch, "batch size (0: the family's default)");
  app.add_option("--heads", flags.options.heads, "attention heads (transformer)");
  app.add_option("--seq", flags.options.sequence, "sequence length (transformer)");
  app.add_option("--seed", flags.options.seed, "seed of the random weights");
  app.add_option("--external-data", flags.externalThreshold,
                 "write parameters of at least this many bytes to FILE.data (0: inline)");
  app.add_flag("--list", flags.list, "list the families and exit");
}

Status generate(const GenFlags& flags, std::ostream& out, std::ostream& err) {
  if (flags.list) {
    for (const gen::FamilyInfo& info : gen::listFamilies())
      out << info.name << ": " << info.description << "\n";
    return {};
  }
  if (flags.family.empty() || flags.n == 0 || flags.output.empty())
    return usageError() << "FAMILY, N and -o FILE are required";
  CLEAVE_TRY(ir::Graph graph, gen::generateFamily(flags.family, flags.n, flags.options));
  CLEAVE_CHECK(io::writeOnnx(graph, flags.output, {.externalDataThreshold = flags.externalThreshold}));
  err << "cleave gen: wrote " << flags.output << " (" << graph.numNodes() << " nodes)\n";
  return {};
}
} // namespace

const Command kGenCommand{"gen", "write a synthetic ONNX model (chain, wide, linear_chain, diamonds, transformer)",
                          parseThenRun<GenFlags, describe, generate>};

} // namespace cleave::cli
