// cli/cmd_shapes.cpp - `cleave shapes MODEL -o OUT.onnx [--inputs FILE | --seed S] [--dim N=S]`:
// shape propagation from sample inputs; writes the model with every value's observed type.
#include "base/json.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/runtime_options.h"
#include "io/model_loader.h"
#include "io/onnx.h"
#include "runtime/shape_propagation.h"

namespace cleave::cli {

int runShapes(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Run a model on sample inputs and record every value's dtype and shape (shape propagation), "
               "for models whose static shapes are incomplete; write the typed model.",
               "cleave shapes"};
  std::string path, output;
  RuntimeOptions runtime;
  bool json = false;
  addModelInput(app, path);
  app.add_option("-o,--output", output, "the typed model (.onnx)")->required();
  app.add_option("--inputs", runtime.inputsPath, "sample input tensors (JSON); default: random from --seed");
  app.add_option("--seed", runtime.seed, "seed of the random inputs")->capture_default_str();
  app.add_option("--dim", runtime.dims, "NAME=SIZE for a symbolic input dim of the random inputs");
  addJsonFlag(app, json);
  return runCommand(app, args, out, err, [&]() -> Status {
    CLEAVE_TRY(ir::Graph graph, io::loadModel(path));
    CLEAVE_TRY(runtime::TensorMap inputs, makeInputs(graph, runtime));
    CLEAVE_TRY(runtime::ShapePropagation typed, runtime::propagateShapes(graph, inputs));
    CLEAVE_CHECK(io::writeOnnx(typed.graph, output));
    std::int64_t unknown = 0;
    for (std::uint32_t v = 0; v < typed.graph.numValues(); ++v)
      unknown += typed.graph.bytes(ir::ValueId{v}) < 0;
    Json summary = {{"model", path}, {"output", output}, {"values", typed.graph.numValues()},
                    {"completed", typed.completed}, {"still_unknown", unknown}};
    if (json)
      out << dumpJson(summary);
    else
      out << "wrote " << output << ": " << typed.completed << " value type(s) completed from the run, " << unknown
          << " still unknown\n";
    return {};
  });
}

} // namespace cleave::cli
