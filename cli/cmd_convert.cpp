// cli/cmd_convert.cpp - `cleave convert MODEL -o OUT.onnx`: read, then write back as ONNX.
#include "cli/commands.h"
#include "cli/options.h"
#include "io/model_loader.h"

namespace cleave::cli {

namespace {
struct ConvertFlags {
  std::string input, output;
  std::int64_t externalThreshold = 0;
  bool check = false;
};

void describe(CLI::App& app, ConvertFlags& flags) {
  app.description("Read an ONNX model into cleave's IR and write it back (types filled by shape inference, parameters "
                  "inline or as external data).");
  app.add_option("-o,--output", flags.output, "the .onnx file to write")->required();
  addModelInput(app, flags.input);
  app.add_option("--external-data", flags.externalThreshold,
                 "write parameters of at least this many bytes to OUT.onnx.data (0: inline)");
  app.add_flag("--check", flags.check, "run onnx's full check on the written model");
}

Status convert(const ConvertFlags& flags, std::ostream&, std::ostream&) {
  CLEAVE_TRY(ir::Graph graph, io::loadModel(flags.input));
  CLEAVE_CHECK(io::writeOnnx(graph, flags.output, {.externalDataThreshold = flags.externalThreshold}));
  if (flags.check)
    CLEAVE_CHECK(io::checkOnnxFile(flags.output));
  return {};
}
} // namespace

const Command kConvertCommand{"convert", "read a model and write it back as ONNX (round trip, external data)",
                              parseThenRun<ConvertFlags, describe, convert>};

} // namespace cleave::cli
