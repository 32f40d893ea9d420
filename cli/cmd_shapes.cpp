// cli/cmd_shapes.cpp - `cleave shapes MODEL -o OUT.onnx [--inputs FILE | --seed S] [--dim N=S]`:
// shape propagation from sample inputs; writes the model with every value's observed type.
#include <sstream>

#include "cli/commands.h"
#include "cli/runtime_options.h"
#include "io/model_loader.h"
#include "io/onnx.h"
#include "report/json_util.h"
#include "runtime/shape_propagation.h"

namespace cleave::cli {

int runShapes(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Run a model on sample inputs and record every value's dtype and shape (shape propagation), "
               "for models whose static shapes are incomplete; write the typed model.",
               "cleave shapes"};
  std::string path, output;
  RuntimeOptions runtime;
  bool json = false;
  app.add_option("MODEL", path, "ONNX model")->required();
  app.add_option("-o,--output", output, "the typed model (.onnx)")->required();
  app.add_option("--inputs", runtime.inputsPath, "sample input tensors (JSON); default: random from --seed");
  app.add_option("--seed", runtime.seed, "seed of the random inputs")->capture_default_str();
  app.add_option("--dim", runtime.dims, "NAME=SIZE for a symbolic input dim of the random inputs");
  app.add_flag("--json", json, "print a JSON summary");
  if (int code = parseArguments(app, args, out, err); code >= 0)
    return code;
  Expected<ir::Graph> graph = io::loadModel(path);
  if (!graph)
    return reportError("cleave shapes", graph.error(), err);
  Expected<runtime::TensorMap> inputs = makeInputs(*graph, runtime);
  if (!inputs)
    return reportError("cleave shapes", inputs.error(), err);
  Expected<runtime::ShapePropagation> typed = runtime::propagateShapes(*graph, *inputs);
  if (!typed)
    return reportError("cleave shapes", typed.error(), err);
  if (Status written = io::writeOnnx(typed->graph, output); !written)
    return reportError("cleave shapes", written.error(), err);
  std::int64_t unknown = 0;
  for (std::uint32_t v = 0; v < typed->graph.numValues(); ++v)
    unknown += typed->graph.bytes(ir::ValueId{v}) < 0;
  report::Json summary = {{"model", path}, {"output", output}, {"values", typed->graph.numValues()},
                          {"completed", typed->completed}, {"still_unknown", unknown}};
  if (json)
    out << report::dumpJson(summary);
  else
    out << "wrote " << output << ": " << typed->completed << " value type(s) completed from the run, " << unknown
        << " still unknown\n";
  return kExitOk;
}

} // namespace cleave::cli
