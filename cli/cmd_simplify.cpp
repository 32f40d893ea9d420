// cli/cmd_simplify.cpp - `cleave simplify MODEL -o OUT.onnx [--json]`: the shape arithmetic of an
// ONNX export folded to constants where the shapes are static (simplify/shape_folding.h), then
// written back as ONNX (cli/planning_model.h, as split/partition/pipeline fold). Prints what it folded.
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/planning_model.h"
#include "io/onnx.h"

namespace cleave::cli {

namespace {
struct SimplifyFlags {
  std::string input, output;
  std::int64_t externalThreshold = 0;
  bool json = false, anyBatch = false;
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
  app.add_flag("--any-batch", flags.anyBatch,
               "fold only what holds for any batch (the inputs' dim 0 read as free), as pipeline does, so the "
               "model still runs other batch sizes");
  addJsonFlag(app, flags.json);
}

Status simplify(const SimplifyFlags& flags, std::ostream& out, std::ostream&) {
  CLEAVE_TRY(PlanningModel model, loadPlanningModel(flags.input, {.anyRows = flags.anyBatch}));
  if (model.graph.modelInfo().format != ir::SourceFormat::Onnx)
    return Error(ErrorCode::InvalidArgument) << flags.input << ": simplify folds ONNX models (an FX graph keeps torch's "
                                                               "shape logic: split it as it is)";
  if (!model.skipped.empty())
    return Error(ErrorCode::Unsupported) << flags.input << ": " << model.skipped;
  CLEAVE_CHECK(io::writeOnnx(model.graph, flags.output, {.externalDataThreshold = flags.externalThreshold}));
  const report::FoldingReport folding = model.folding.value_or(report::FoldingReport{.anyRows = flags.anyBatch});
  if (flags.json) {
    Json json{{"model", flags.input}, {"output", flags.output}};
    json.update(report::foldingJson(folding));
    out << toJsonText(json) << "\n";
    return {};
  }
  out << report::foldingText(folding) << "wrote " << flags.output << "\n";
  return {};
}
} // namespace

const Command kSimplifyCommand{"simplify", "fold a model's static shape arithmetic to constants (ONNX in, ONNX out)",
                               parseThenRun<SimplifyFlags, describe, simplify>};

} // namespace cleave::cli
