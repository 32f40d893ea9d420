// cli/cmd_inspect.cpp - `cleave inspect MODEL [--json] [--nodes] [--check]`.
#include "cli/commands.h"
#include "io/model_loader.h"
#include "ir/analysis.h"
#include "report/inspect_report.h"
#include "runtime/kernel.h"

namespace cleave::cli {

int runInspect(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Print node and edge counts, op histogram, parameter and activation bytes, "
               "inputs/outputs, depth and widest level of a model.",
               "cleave inspect"};
  std::string path;
  bool json = false, nodes = false, check = false, noInfer = false;
  std::size_t top = 0;
  app.add_option("MODEL", path, "ONNX file or FX-graph JSON")->required();
  app.add_flag("--json", json, "machine-readable output");
  app.add_flag("--nodes", nodes, "list every node (JSON) or print the graph's text form");
  app.add_flag("--check", check, "also run onnx's full check (ONNX models)");
  app.add_flag("--no-infer", noInfer, "do not run onnx shape inference");
  app.add_option("--top", top, "show only the K most frequent op types (0: all)");
  if (int code = parseArguments(app, args, out, err); code >= 0)
    return code;

  io::OnnxReadOptions readOptions;
  if (noInfer)
    readOptions.shapeInference = io::ShapeInference::Never;
  Expected<ir::Graph> graph = io::loadModel(path, readOptions);
  if (!graph)
    return reportError("cleave inspect", graph.error(), err);
  if (check) {
    Expected<io::ModelFormat> format = io::detectModelFormat(path);
    if (format && *format == io::ModelFormat::Onnx)
      if (Status checked = io::checkOnnxFile(path); !checked)
        return reportError("cleave inspect", checked.error(), err);
  }
  ir::GraphStats stats = ir::computeGraphStats(*graph);
  report::InspectOptions options{.includeNodes = nodes, .topOps = top};
  if (graph->modelInfo().format == ir::SourceFormat::Onnx)
    options.missingKernels = runtime::missingKernels(*graph);
  if (json)
    out << report::dumpJson(report::inspectJson(*graph, stats, path, options));
  else
    report::printInspectText(*graph, stats, path, options, out);
  return kExitOk;
}

} // namespace cleave::cli
