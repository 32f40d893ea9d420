// base/file_io.h - bounded whole-file reads and crash-safe writes.
// Every file cleave reads is opened here or in base/mapped_file.h: only regular files are read
// (a FIFO, a device such as /dev/zero or a directory is refused before any byte is read, so no
// read can hang or run without end), and whole-file reads are bounded by a size limit.
// Every file cleave writes goes through writeFileAtomically: data goes to a temporary name in the
// destination's directory and is renamed into place, so a reader never sees a half-written file
// and a failure leaves nothing behind. Output directories: base/output_directory.h.
// Complexity: reads and writes are linear in the file's bytes; a write adds one rename.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/expected.h"

namespace cleave {

// The largest text input (JSON, CSV) readFile takes by default.
inline constexpr std::uint64_t kMaxTextFileBytes = std::uint64_t{1} << 30;

// An open file descriptor of a regular file, and its size. Closes on destruction.
class RegularFile {
public:
  // Fails: NotFound (cannot open), InvalidArgument (not a regular file: directory, FIFO, device,
  // socket).
  static Expected<RegularFile> open(const std::string& path);
  RegularFile(RegularFile&& other) noexcept : fd_(other.fd_), size_(other.size_) { other.fd_ = -1; }
  RegularFile& operator=(RegularFile&&) = delete;
  ~RegularFile();
  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }

private:
  RegularFile(int fd, std::uint64_t size) : fd_(fd), size_(size) {}
  int fd_;
  std::uint64_t size_;
};

// Reads a whole regular file of at most `maxBytes`. Fails: NotFound, InvalidArgument (not a
// regular file, or larger than maxBytes), IoError.
Expected<std::string> readFile(const std::string& path, std::uint64_t maxBytes = kMaxTextFileBytes);
Status writeFileAtomically(const std::string& path, std::string_view contents);

// `reference` (a file named inside an input: ONNX external data, a plan's submodel, a device's
// profile) resolved against `folder`, the folder of the input that names it. The result, with
// every symbolic link followed, must lie inside `folder`: absolute references and ones that climb
// out (`../x`, or a link leading out) are refused, so an input never makes cleave read a file
// outside its own folder. `what` names the reference in the error. Fails: InvalidArgument.
Expected<std::string> resolveInsideFolder(const std::string& folder, const std::string& reference,
                                          std::string_view what);

// `path` made absolute, with symbolic links followed as far as it exists.
std::string resolvedPath(const std::string& path);

// `inner` is `outer` or lies below it, both resolved (absolute, symbolic links followed as far as
// they exist).
bool isSameOrInside(const std::string& inner, const std::string& outer);

// `path` plus a suffix unique to this process and call (".tmp.PID.N"): a name in the same
// directory for staging a file or directory before renaming it into place.
std::string uniqueTemporaryName(const std::string& path);

} // namespace cleave
