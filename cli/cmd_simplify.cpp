// cli/cmd_simplify.cpp - `cleave simplify MODEL -o OUT.onnx [--json]`: the shape arithmetic of an
// ONNX export folded to constants where the shapes are static (simplify/shape_folding.h), then
// written back as ONNX. Prints what it folded.
#include "cli/commands.h"
#include "cli/options.h"
#include "io/model_loader.h"
#include "simplify/shape_folding.h"

namespace cleave::cli {

namespace {
struct SimplifyFlags {
  std::string input, output;
  std::int64_t externalThreshold = 0;
  bool json = false;
};

void describe(CLI::App& app, SimplifyFlags& flags) {
  app.description("Fold an ONNX model's shape arithmetic (Shape, Size and the integer ops, Concat, Gather, Slice, "
                  "Unsqueeze, Squeeze, Range, Cast, ... after them) to constants where the shapes it reads are "
                  "static, remove the nodes nothing reads, and write the model: the outputs are unchanged. "
                  "split, partition and pipeline fold the same way before planning (--no-simplify turns it off).");
  addModelInput(app, flags.input);
  app.add_option("-o,--output", flags.output, "the .onnx file to write")->required();
  app.add_option("--external-data", flags.externalThreshold,
                 "write parameters of at least this many bytes to OUT.onnx.data (0: inline)");
  addJsonFlag(app, flags.json);
}

Status simplify(const SimplifyFlags& flags, std::ostream& out, std::ostream&) {
  CLEAVE_TRY(ir::Graph graph, io::loadModel(flags.input));
  if (graph.modelInfo().format != ir::SourceFormat::Onnx)
    return Error(ErrorCode::InvalidArgument) << flags.input << ": simplify folds ONNX models (an FX graph keeps torch's "
                                                               "shape logic: split it as it is)";
  const simplify::FoldPlan plan = simplify::planShapeFolding(graph);
  CLEAVE_TRY(ir::Graph folded, simplify::applyFoldPlan(graph, plan));
  CLEAVE_CHECK(io::writeOnnx(folded, flags.output, {.externalDataThreshold = flags.externalThreshold}));
  Json byOp = Json::object();
  for (const auto& [op, count] : plan.foldedByOp)
    byOp[op] = count;
  if (flags.json) {
    out << toJsonText(Json{{"model", flags.input}, {"output", flags.output}, {"folded_nodes", plan.folded},
                           {"removed_nodes", plan.removed}, {"constants", plan.constants.size()},
                           {"kept_nodes", plan.kept.size()}, {"folded_by_op", byOp}})
        << "\n";
    return {};
  }
  out << "folded " << plan.folded << " nodes to constants and removed " << plan.removed << " (" << plan.kept.size()
      << " op nodes remain, " << plan.constants.size() << " new initializers)";
  if (!plan.foldedByOp.empty()) {
    out << ":";
    for (const auto& [op, count] : plan.foldedByOp)
      out << " " << op << " " << count;
  }
  out << "\nwrote " << flags.output << "\n";
  return {};
}
} // namespace

const Command kSimplifyCommand{"simplify", "fold a model's static shape arithmetic to constants (ONNX in, ONNX out)",
                               parseThenRun<SimplifyFlags, describe, simplify>};

} // namespace cleave::cli
