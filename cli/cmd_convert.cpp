// cli/cmd_convert.cpp - `cleave convert MODEL -o OUT.onnx`: read, then write back as ONNX.
#include "cli/commands.h"
#include "io/model_loader.h"

namespace cleave::cli {

int runConvert(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Read an ONNX model into cleave's IR and write it back (types filled by shape "
               "inference, parameters inline or as external data).",
               "cleave convert"};
  std::string input, output;
  std::int64_t externalThreshold = 0;
  bool check = false;
  app.add_option("MODEL", input, "ONNX model")->required();
  app.add_option("-o,--output", output, "the .onnx file to write")->required();
  app.add_option("--external-data", externalThreshold,
                 "write parameters of at least this many bytes to OUT.onnx.data (0: inline)");
  app.add_flag("--check", check, "run onnx's full check on the written model");
  if (int code = parseArguments(app, args, out, err); code >= 0)
    return code;
  Expected<ir::Graph> graph = io::loadModel(input);
  if (!graph)
    return reportError("cleave convert", graph.error(), err);
  if (Status written = io::writeOnnx(*graph, output, {.externalDataThreshold = externalThreshold}); !written)
    return reportError("cleave convert", written.error(), err);
  if (check)
    if (Status checked = io::checkOnnxFile(output); !checked)
      return reportError("cleave convert", checked.error(), err);
  return kExitOk;
}

} // namespace cleave::cli
