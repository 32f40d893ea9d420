#include "io/model_loader.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unistd.h>

#include "base/file_io.h"
#include "io/fx.h"

namespace cleave::io {

Expected<ModelFormat> detectModelFormat(const std::string& path) {
  CLEAVE_TRY(RegularFile file, RegularFile::open(path));
  // The first non-blank byte decides: '{' starts FX-graph JSON, anything else is ONNX protobuf.
  char buffer[4096];
  while (true) {
    ssize_t got = ::read(file.fd(), buffer, sizeof buffer);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return Error(ErrorCode::IoError) << "cannot read '" << path << "': " << std::strerror(errno);
    if (got == 0)
      return Error(ErrorCode::ParseError) << "'" << path << "' is empty";
    for (ssize_t i = 0; i < got; ++i)
      if (!std::isspace(static_cast<unsigned char>(buffer[i])))
        return buffer[i] == '{' ? ModelFormat::FxJson : ModelFormat::Onnx;
  }
}

Expected<ir::Graph> loadModel(const std::string& path, const OnnxReadOptions& options) {
  CLEAVE_TRY(ModelFormat format, detectModelFormat(path));
  return format == ModelFormat::FxJson ? readFxGraph(path) : readOnnx(path, options);
}

} // namespace cleave::io
