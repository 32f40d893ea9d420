#include "base/file_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace cleave {
namespace fs = std::filesystem;
namespace {
std::string uniqueSuffix() {
  static unsigned counter = 0;
  return ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}
} // namespace

Expected<std::string> readFile(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return Error(ErrorCode::InvalidArgument) << "'" << path << "' is a directory, not a file";
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file)
    return Error(ErrorCode::NotFound) << "cannot open '" << path << "': " << std::strerror(errno);
  std::string contents;
  char buffer[1 << 16];
  std::size_t got;
  while ((got = std::fread(buffer, 1, sizeof buffer, file)) > 0)
    contents.append(buffer, got);
  bool failed = std::ferror(file);
  std::fclose(file);
  if (failed)
    return Error(ErrorCode::IoError) << "cannot read '" << path << "'";
  return contents;
}

Status writeFileAtomically(const std::string& path, std::string_view contents) {
  std::string temp = path + uniqueSuffix();
  std::FILE* file = std::fopen(temp.c_str(), "wb");
  if (!file)
    return Error(ErrorCode::IoError) << "cannot write '" << path << "': " << std::strerror(errno);
  bool ok = std::fwrite(contents.data(), 1, contents.size(), file) == contents.size();
  ok = (std::fclose(file) == 0) && ok;
  if (!ok || std::rename(temp.c_str(), path.c_str()) != 0) {
    int savedErrno = errno;
    std::remove(temp.c_str());
    return Error(ErrorCode::IoError) << "cannot write '" << path << "': " << std::strerror(savedErrno);
  }
  return {};
}

Expected<std::string> makeStagingDirectory(const std::string& finalDir) {
  fs::path target(finalDir);
  fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    return Error(ErrorCode::IoError) << "cannot create '" << finalDir << "': parent directory '"
                                     << parent.string() << "' does not exist";
  std::string staging = (parent / ("." + target.filename().string() + uniqueSuffix())).string();
  if (!fs::create_directory(staging, ec))
    return Error(ErrorCode::IoError) << "cannot create '" << finalDir << "': " << ec.message();
  return staging;
}

Status commitDirectory(const std::string& stagingDir, const std::string& finalDir) {
  std::error_code ec;
  if (fs::exists(finalDir, ec)) {
    if (!fs::is_directory(finalDir, ec))
      return Error(ErrorCode::IoError) << "'" << finalDir << "' exists and is not a directory";
    fs::remove_all(finalDir, ec);
    if (ec)
      return Error(ErrorCode::IoError) << "cannot replace '" << finalDir << "': " << ec.message();
  }
  fs::rename(stagingDir, finalDir, ec);
  if (ec)
    return Error(ErrorCode::IoError) << "cannot move output into '" << finalDir
                                     << "': " << ec.message();
  return {};
}

void discardDirectory(const std::string& stagingDir) {
  std::error_code ec;
  fs::remove_all(stagingDir, ec);
}

} // namespace cleave
