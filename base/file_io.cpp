#include "base/file_io.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cleave {

namespace {
const char* kindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}
} // namespace

Expected<RegularFile> RegularFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return Error(ErrorCode::NotFound) << "cannot open '" << path << "': " << std::strerror(errno);
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    int saved = errno;
    ::close(fd);
    return Error(ErrorCode::IoError) << "cannot inspect '" << path << "': " << std::strerror(saved);
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return Error(ErrorCode::InvalidArgument) << "'" << path << "' is " << kindOf(info.st_mode)
                                             << ", not a regular file";
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return RegularFile(fd, static_cast<std::uint64_t>(info.st_size));
}

RegularFile::~RegularFile() {
  if (fd_ >= 0)
    ::close(fd_);
}

Expected<std::string> readFile(const std::string& path, std::uint64_t maxBytes) {
  CLEAVE_TRY(RegularFile file, RegularFile::open(path));
  if (file.size() > maxBytes)
    return Error(ErrorCode::InvalidArgument) << "'" << path << "' is " << file.size()
                                             << " bytes; cleave reads at most " << maxBytes
                                             << " bytes from a file of this kind";
  std::string contents(file.size(), '\0');
  std::size_t done = 0;
  while (done < contents.size()) {
    ssize_t got = ::read(file.fd(), contents.data() + done, contents.size() - done);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return Error(ErrorCode::IoError) << "cannot read '" << path << "': " << std::strerror(errno);
    if (got == 0) // the file shrank while being read
      break;
    done += static_cast<std::size_t>(got);
  }
  contents.resize(done);
  return contents;
}

namespace {
namespace fs = std::filesystem;
fs::path resolvedFsPath(const fs::path& path) {
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec);
  if (ec)
    return path.lexically_normal();
  fs::path result = fs::weakly_canonical(absolute, ec);
  return ec ? absolute.lexically_normal() : result;
}
bool pathWithin(const fs::path& inner, const fs::path& outer) {
  auto [o, i] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
  return o == outer.end();
}
} // namespace

std::string resolvedPath(const std::string& path) { return resolvedFsPath(path).string(); }

bool isSameOrInside(const std::string& inner, const std::string& outer) {
  return pathWithin(resolvedFsPath(inner), resolvedFsPath(outer));
}

Expected<std::string> resolveInsideFolder(const std::string& folder, const std::string& reference,
                                          std::string_view what) {
  std::string base = folder.empty() ? std::string(".") : folder;
  auto refuse = [&](const char* why) {
    return Error(ErrorCode::InvalidArgument) << what << " '" << reference << "' " << why << " '" << base << "'";
  };
  if (reference.empty() || reference.find('\0') != std::string::npos)
    return refuse("is not a file name inside");
  fs::path ref(reference);
  if (ref.is_absolute())
    return refuse("is an absolute path; it must name a file inside");
  fs::path joined = fs::path(base) / ref;
  fs::path resolvedFolder = resolvedFsPath(base), resolvedFile = resolvedFsPath(joined);
  if (resolvedFile == resolvedFolder || !pathWithin(resolvedFile, resolvedFolder))
    return refuse("lies outside its folder");
  return joined.string();
}

std::string uniqueTemporaryName(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

Status writeFileAtomically(const std::string& path, std::string_view contents) {
  std::string temp = uniqueTemporaryName(path);
  std::FILE* file = std::fopen(temp.c_str(), "wbx");
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

} // namespace cleave
