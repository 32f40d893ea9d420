// cli/cmd_inspect.cpp - `cleave inspect MODEL [--json] [--nodes] [--check]`.
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/runtime_library.h"
#include "io/fixed_batch.h"
#include "io/model_loader.h"
#include "ir/analysis.h"
#include "report/inspect_report.h"

namespace cleave::cli {

namespace {
struct InspectFlags {
  std::string path;
  bool json = false, nodes = false, check = false, noInfer = false;
  std::size_t top = 0;
};

void describe(CLI::App& app, InspectFlags& flags) {
  app.description("Print node and edge counts, op histogram, parameter and activation bytes, inputs/outputs, depth "
                  "and widest level of a model, and whether its batch is free (a static-batch export may hold it "
                  "in constant shapes, so that microbatches of other rows cannot run).");
  addModelInput(app, flags.path);
  addJsonFlag(app, flags.json);
  app.add_flag("--nodes", flags.nodes, "list every node (JSON) or print the graph's text form");
  app.add_flag("--check", flags.check, "also run onnx's full check (ONNX models)");
  app.add_flag("--no-infer", flags.noInfer, "do not run onnx shape inference, nor the batch analysis (which runs it on models with a "
               "constant-shape Reshape)");
  app.add_option("--top", flags.top, "show only the K most frequent op types (0: all)");
}

Status inspect(const InspectFlags& flags, std::ostream& out, std::ostream&) {
  io::OnnxReadOptions readOptions;
  if (flags.noInfer)
    readOptions.shapeInference = io::ShapeInference::Never;
  CLEAVE_TRY(ir::Graph graph, io::loadModel(flags.path, readOptions));
  if (flags.check && graph.modelInfo().format == ir::SourceFormat::Onnx)
    CLEAVE_CHECK(io::checkOnnxFile(flags.path));
  ir::GraphStats stats = ir::computeGraphStats(graph);
  report::InspectOptions options{.includeNodes = flags.nodes, .topOps = flags.top, .missingKernels = {}};
  if (graph.modelInfo().format == ir::SourceFormat::Onnx) {
    CLEAVE_TRY(const RuntimeLibrary* runtime, loadRuntimeLibrary());
    options.missingKernels = runtime->missingKernels(graph);
  }
  if (graph.modelInfo().format == ir::SourceFormat::Onnx && !flags.noInfer) {
    Expected<io::FixedBatch> batch = io::findFixedBatch(flags.path, graph);
    if (batch)
      options.batch = std::move(*batch);
    else
      options.batchUnknown = batch.error().message();
  }
  if (flags.json)
    out << dumpJson(report::inspectJson(graph, stats, flags.path, options));
  else
    report::printInspectText(graph, stats, flags.path, options, out);
  return {};
}
} // namespace

const Command kInspectCommand{"inspect", "counts, sizes, op histogram, inputs/outputs, depth and width of a model",
                              parseThenRun<InspectFlags, describe, inspect>};

} // namespace cleave::cli
