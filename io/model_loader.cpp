#include "io/model_loader.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unistd.h>

#include "base/file_io.h"
#include "io/fx.h"
#include "io/pt2.h"

namespace cleave::io {

Expected<ModelFormat> detectModelFormat(const std::string& path) {
  CLEAVE_TRY(RegularFile file, RegularFile::open(path));
  // A zip's local header starts a .pt2; else the first non-blank byte decides: '{' starts FX-graph
  // JSON, anything else is ONNX protobuf.
  char buffer[4096];
  bool first = true;
  while (true) {
    ssize_t got = ::read(file.fd(), buffer, sizeof buffer);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return Error(ErrorCode::IoError) << "cannot read '" << path << "': " << std::strerror(errno);
    if (got == 0)
      return Error(ErrorCode::ParseError) << "'" << path << "' is empty";
    if (first && got >= 4 && std::memcmp(buffer, "PK\x03\x04", 4) == 0)
      return ModelFormat::ExportedProgram;
    first = false;
    for (ssize_t i = 0; i < got; ++i)
      if (!std::isspace(static_cast<unsigned char>(buffer[i])))
        return buffer[i] == '{' ? ModelFormat::FxJson : ModelFormat::Onnx;
  }
}

Expected<ir::Graph> loadModel(const std::string& path, const OnnxReadOptions& options) {
  CLEAVE_TRY(ModelFormat format, detectModelFormat(path));
  switch (format) {
  case ModelFormat::FxJson: return readFxGraph(path);
  case ModelFormat::ExportedProgram: return readExportedProgram(path);
  case ModelFormat::Onnx: break;
  }
  return readOnnx(path, options);
}

} // namespace cleave::io
