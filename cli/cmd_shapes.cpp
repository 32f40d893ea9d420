// cli/cmd_shapes.cpp - `cleave shapes MODEL -o OUT.onnx [--inputs FILE | --seed S] [--dim N=S]`:
// shape propagation from sample inputs; writes the model with every value's observed type.
#include "base/json.h"
#include "cli/commands.h"
#include "cli/runtime_library.h"
#include "cli/options.h"
#include "cli/runtime_inputs.h"
#include "io/model_loader.h"
#include "io/onnx.h"
#include "runtime/model/shape_propagation.h"

namespace cleave::cli {

namespace {
struct ShapesFlags {
  std::string path, output;
  RuntimeOptions runtime;
  bool json = false;
};

void describe(CLI::App& app, ShapesFlags& flags) {
  app.description("Run a model on sample inputs and record every value's dtype and shape (shape propagation), for models "
                  "whose static shapes are incomplete; write the typed model.");
  addModelInput(app, flags.path);
  app.add_option("-o,--output", flags.output, "the typed model (.onnx)")->required();
  app.add_option("--inputs", flags.runtime.inputsPath, "sample input tensors (.json, .pb, .npy, .npz or a folder); default: random from --seed");
  app.add_option("--seed", flags.runtime.seed, "seed of the random inputs")->capture_default_str();
  app.add_option("--dim", flags.runtime.dims, "NAME=SIZE for a symbolic input dim of the random inputs");
  addJsonFlag(app, flags.json);
}

Status propagate(const ShapesFlags& flags, std::ostream& out, std::ostream&) {
  CLEAVE_TRY(ir::Graph graph, io::loadModel(flags.path));
  CLEAVE_TRY(runtime::TensorMap inputs, makeInputs(graph, flags.runtime));
  CLEAVE_TRY(runtime::ShapePropagation typed, runtime::propagateShapes(graph, inputs));
  CLEAVE_CHECK(io::writeOnnx(typed.graph, flags.output));
  std::int64_t unknown = 0;
  for (std::uint32_t v = 0; v < typed.graph.numValues(); ++v)
    unknown += typed.graph.bytes(ir::ValueId{v}) < 0;
  Json summary = {{"model", flags.path}, {"output", flags.output}, {"values", typed.graph.numValues()},
                  {"completed", typed.completed}, {"still_unknown", unknown}};
  if (flags.json)
    out << dumpJson(summary);
  else
    out << "wrote " << flags.output << ": " << typed.completed << " value type(s) completed from the run, "
        << unknown << " still unknown\n";
  return {};
}
} // namespace

const CommandBody kShapesBody{"shapes", parseThenRun<ShapesFlags, describe, propagate>};

} // namespace cleave::cli
