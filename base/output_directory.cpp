#include "base/output_directory.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <optional>
#include <set>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file_io.h"

namespace cleave {
namespace fs = std::filesystem;

namespace {

// `out/`, `out//` and `out` name one directory.
fs::path withoutTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/')
    path.pop_back();
  return fs::path(path);
}

Error refused(const std::string& path, const std::string& why) {
  return Error(ErrorCode::InvalidArgument) << "refusing to write output directory '" << path << "': " << why;
}

// Why cleave may not replace the resolved directory `target`, or "" when it may.
std::string protectedReason(const fs::path& target, const OutputDirectoryOptions& options) {
  if (target == target.root_path())
    return "it is the file system root";
  if (const char* home = std::getenv("HOME"); home && *home && isSameOrInside(home, target.string()))
    return "it is or holds the home folder";
  std::error_code ec;
  fs::path cwd = fs::current_path(ec);
  if (!ec && isSameOrInside(cwd.string(), target.string()))
    return "it is or holds the current directory";
  for (const std::string& input : options.inputs)
    if (!input.empty() && input != "-" && isSameOrInside(input, target.string()))
      return "it holds the input '" + input + "'";
  return "";
}

// The names a cleave output lists in its marker, or nullopt when the marker is absent.
std::optional<std::set<std::string>> markerEntries(const fs::path& dir) {
  Expected<std::string> text = readFile((dir / OutputDirectory::kMarkerName).string());
  if (!text)
    return std::nullopt;
  std::set<std::string> names;
  std::size_t start = 0;
  while (start < text->size()) {
    std::size_t end = text->find('\n', start);
    if (end == std::string::npos)
      end = text->size();
    if (start > 0) // the first line is the header
      names.insert(text->substr(start, end - start));
    start = end + 1;
  }
  return names;
}

enum class Existing { Empty, CleaveOutput, Foreign };

Existing classify(const fs::path& dir) {
  std::optional<std::set<std::string>> listed = markerEntries(dir);
  std::error_code ec;
  bool empty = true;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    empty = false;
    std::string name = entry.path().filename().string();
    if (!listed || (name != OutputDirectory::kMarkerName && !listed->count(name)))
      return Existing::Foreign;
  }
  if (ec)
    return Existing::Foreign;
  return empty ? Existing::Empty : Existing::CleaveOutput;
}

std::string foreignReason() {
  return std::string("it exists and is not a cleave output (no ") + OutputDirectory::kMarkerName +
         " marker listing every entry); choose another directory or pass --force";
}

// Holds an exclusive lock on a directory (the output's parent) for the duration of a commit, so
// two commits to one place run one after the other.
class DirectoryLock {
public:
  explicit DirectoryLock(const std::string& dir) : fd_(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    if (fd_ >= 0)
      ::flock(fd_, LOCK_EX);
  }
  ~DirectoryLock() {
    if (fd_ >= 0)
      ::close(fd_); // releases the lock
  }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

private:
  int fd_;
};

// rename(2) with Linux's flags; falls back where the file system does not support them (the
// caller holds the parent's lock, so the fallback's check-then-rename does not race cleave).
int renameWithFlags(const std::string& from, const std::string& to, unsigned flags) {
  int result = ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), flags);
  if (result == 0 || (errno != EINVAL && errno != ENOSYS))
    return result;
  if (flags == RENAME_NOREPLACE) {
    struct stat st;
    if (::lstat(to.c_str(), &st) == 0) {
      errno = EEXIST;
      return -1;
    }
    return std::rename(from.c_str(), to.c_str());
  }
  // RENAME_EXCHANGE without support: move `to` aside under a third name, then swap.
  std::string aside = uniqueTemporaryName(to);
  if (std::rename(to.c_str(), aside.c_str()) != 0)
    return -1;
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    int saved = errno;
    std::rename(aside.c_str(), to.c_str());
    errno = saved;
    return -1;
  }
  return std::rename(aside.c_str(), from.c_str());
}

// Removes an earlier output that was swapped out of place: only the entries its marker lists
// (and the marker), unless `force` asked for all of it. A directory that still holds something
// else stays (renamed out of the way), so nothing cleave did not write is lost.
void removeReplaced(const fs::path& old, bool force) {
  std::error_code ec;
  if (!force) {
    if (std::optional<std::set<std::string>> listed = markerEntries(old))
      for (const std::string& name : *listed)
        if (!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..")
          fs::remove_all(old / name, ec);
    fs::remove(old / OutputDirectory::kMarkerName, ec);
    fs::remove(old, ec); // fails, and keeps it, if anything else is left
    return;
  }
  fs::remove_all(old, ec);
}

} // namespace

Expected<OutputDirectory::Snapshot> OutputDirectory::snapshotOf(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return Snapshot{};
    return Error(ErrorCode::IoError) << "cannot inspect '" << path << "': " << std::strerror(errno);
  }
  if (S_ISLNK(st.st_mode))
    return refused(path, "it is a symbolic link (give the directory itself)");
  if (!S_ISDIR(st.st_mode))
    return refused(path, "it exists and is not a directory");
  return Snapshot{true, static_cast<unsigned long long>(st.st_dev), static_cast<unsigned long long>(st.st_ino)};
}

Expected<OutputDirectory> OutputDirectory::open(const std::string& path, const OutputDirectoryOptions& options) {
  if (path.empty())
    return Error(ErrorCode::InvalidArgument) << "no output directory given";
  fs::path target = withoutTrailingSlashes(path);
  fs::path resolvedTarget = resolvedPath(target.string());
  if (std::string why = protectedReason(resolvedTarget, options); !why.empty())
    return refused(path, why);
  if (target.filename() == "." || target.filename() == "..")
    return refused(path, "name the directory itself, not '.' or '..'");
  fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    return Error(ErrorCode::IoError) << "cannot create '" << path << "': parent directory '" << parent.string()
                                     << "' does not exist";
  CLEAVE_TRY(Snapshot before, snapshotOf(target.string()));
  if (before.exists && !options.force && classify(target) == Existing::Foreign)
    return refused(path, foreignReason());
  std::string staging = uniqueTemporaryName((parent / ("." + target.filename().string())).string());
  if (!fs::create_directory(staging, ec))
    return Error(ErrorCode::IoError) << "cannot create '" << path << "': " << (ec ? ec.message() : "exists");
  return OutputDirectory(target.string(), std::move(staging), before, options.force);
}

OutputDirectory::OutputDirectory(OutputDirectory&& other) noexcept
    : final_(std::move(other.final_)), staging_(std::move(other.staging_)), before_(other.before_),
      force_(other.force_), done_(other.done_) {
  other.done_ = true;
}

OutputDirectory::~OutputDirectory() {
  if (done_)
    return;
  std::error_code ec;
  fs::remove_all(staging_, ec); // only ever the staging directory this object made
}

Status OutputDirectory::commit() {
  CLEAVE_ASSERT(!done_, "output directory committed twice");
  // The marker lists what this run wrote, so a later run may replace exactly that.
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(staging_, ec))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  std::string marker = "cleave output: the entries below were written by cleave\n";
  for (const std::string& name : names)
    marker += name + "\n";
  CLEAVE_CHECK(writeFileAtomically(staging_ + "/" + kMarkerName, marker));

  fs::path parent = fs::path(final_).has_parent_path() ? fs::path(final_).parent_path() : fs::path(".");
  DirectoryLock lock(parent.string());
  CLEAVE_TRY(Snapshot now, snapshotOf(final_));
  if (!(now == before_))
    return Error(ErrorCode::InvalidArgument) << "output directory '" << final_
                                             << "' changed while this run was writing it (another cleave "
                                                "writing there?); it was left as the other writer made it";
  if (!now.exists) {
    if (renameWithFlags(staging_, final_, RENAME_NOREPLACE) != 0)
      return Error(ErrorCode::IoError) << "cannot move output into '" << final_ << "': " << std::strerror(errno);
    done_ = true;
    return {};
  }
  return replaceExisting();
}

Status OutputDirectory::replaceExisting() {
  Existing kind = classify(final_);
  if (kind == Existing::Foreign && !force_)
    return refused(final_, foreignReason());
  if (renameWithFlags(staging_, final_, RENAME_EXCHANGE) != 0)
    return Error(ErrorCode::IoError) << "cannot move output into '" << final_ << "': " << std::strerror(errno);
  done_ = true;
  // The old directory now sits at the staging name.
  removeReplaced(staging_, force_ && kind == Existing::Foreign);
  return {};
}

} // namespace cleave
