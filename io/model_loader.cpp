#include "io/model_loader.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "io/fx.h"

namespace cleave::io {

Expected<ModelFormat> detectModelFormat(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return Error(ErrorCode::InvalidArgument) << "'" << path << "' is a directory, not a model";
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file)
    return Error(ErrorCode::NotFound) << "cannot open '" << path << "': " << std::strerror(errno);
  int c;
  do {
    c = std::fgetc(file);
  } while (c != EOF && std::isspace(c));
  std::fclose(file);
  if (c == EOF)
    return Error(ErrorCode::ParseError) << "'" << path << "' is empty";
  return c == '{' ? ModelFormat::FxJson : ModelFormat::Onnx;
}

Expected<ir::Graph> loadModel(const std::string& path, const OnnxReadOptions& options) {
  CLEAVE_TRY(ModelFormat format, detectModelFormat(path));
  return format == ModelFormat::FxJson ? readFxGraph(path) : readOnnx(path, options);
}

} // namespace cleave::io
