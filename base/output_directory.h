// base/output_directory.h - the one way cleave writes an output directory (`-o DIR`).
//
// Guarantees:
//  - Whole or nothing: files go to a fresh hidden sibling ("staging") directory; commit() moves it
//    into place with one rename (renameat2 NOREPLACE / EXCHANGE), so a reader sees the old
//    directory or the new one, never a mix. A run that fails or is abandoned removes only its
//    staging directory.
//  - Nothing cleave did not create is deleted. An existing DIR is replaced only when it is empty
//    or an earlier cleave output: it holds the marker file `.cleave-output`, and every entry in it
//    is listed there. Any other existing directory is refused unless `force`; a file, a symbolic
//    link or a device at DIR is always refused.
//  - Never replaced, even with `force`: the file system root, the home folder, the current
//    directory or any folder above it (`.`, `..`), and any folder that holds one of the run's
//    inputs. A trailing slash means the same directory (`out/` is `out`).
//  - Two writers to one DIR: both stage privately; at commit the second finds DIR changed since it
//    started and fails with a clear error, leaving the first's output whole.
// Cost: one stat per input and per path component when opening; commit is O(entries) in the
// replaced directory.
#pragma once

#include <string>
#include <vector>

#include "base/expected.h"

namespace cleave {

struct OutputDirectoryOptions {
  bool force = false;               // replace a non-empty directory cleave did not write
  std::vector<std::string> inputs;  // the run's input files: DIR may not hold any of them
};

class OutputDirectory {
public:
  // Checks `path` against the rules above and creates the staging directory. Fails:
  // InvalidArgument (a refused path, naming the rule), IoError (parent missing, unwritable).
  static Expected<OutputDirectory> open(const std::string& path, const OutputDirectoryOptions& options);

  OutputDirectory(OutputDirectory&& other) noexcept;
  OutputDirectory& operator=(OutputDirectory&&) = delete;
  OutputDirectory(const OutputDirectory&) = delete;
  ~OutputDirectory(); // removes the staging directory unless committed

  // Where to write the files (the staging directory).
  const std::string& stagingPath() const { return staging_; }
  // The directory named by the user, normalized.
  const std::string& finalPath() const { return final_; }

  // Writes the marker and moves the staging directory into place. Fails: InvalidArgument (DIR
  // changed since open(), or became unreplaceable), IoError.
  [[nodiscard]] Status commit();

  static constexpr const char* kMarkerName = ".cleave-output";

private:
  struct Snapshot {
    bool exists = false;
    unsigned long long device = 0, inode = 0;
    bool operator==(const Snapshot&) const = default;
  };
  OutputDirectory(std::string finalPath, std::string staging, Snapshot before, bool force)
      : final_(std::move(finalPath)), staging_(std::move(staging)), before_(before), force_(force) {}

  std::string final_, staging_;
  Snapshot before_;
  bool force_ = false;
  bool done_ = false;

  static Expected<Snapshot> snapshotOf(const std::string& path);
  Status replaceExisting();
};

} // namespace cleave
