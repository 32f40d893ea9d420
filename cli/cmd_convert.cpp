// cli/cmd_convert.cpp - `cleave convert MODEL -o OUT.onnx`: read, then write back as ONNX.
#include "cli/commands.h"
#include "cli/options.h"
#include "io/model_loader.h"

namespace cleave::cli {

int runConvert(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Read an ONNX model into cleave's IR and write it back (types filled by shape "
               "inference, parameters inline or as external data).",
               "cleave convert"};
  std::string input, output;
  std::int64_t externalThreshold = 0;
  bool check = false;
  addModelInput(app, input);
  app.add_option("-o,--output", output, "the .onnx file to write")->required();
  app.add_option("--external-data", externalThreshold,
                 "write parameters of at least this many bytes to OUT.onnx.data (0: inline)");
  app.add_flag("--check", check, "run onnx's full check on the written model");
  return runCommand(app, args, out, err, [&]() -> Status {
    CLEAVE_TRY(ir::Graph graph, io::loadModel(input));
    CLEAVE_CHECK(io::writeOnnx(graph, output, {.externalDataThreshold = externalThreshold}));
    if (check)
      CLEAVE_CHECK(io::checkOnnxFile(output));
    return {};
  });
}

} // namespace cleave::cli
