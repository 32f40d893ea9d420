// cli/output_options.h - `-o DIR` and `--force`, shared by every command that writes an output
// directory. The directory is checked (base/output_directory.h) before any work starts, so a
// refused `-o` costs the user nothing.
#pragma once

#include <optional>

#include "base/output_directory.h"
#include "cli/commands.h"

namespace cleave::cli {

struct OutputDirectoryFlags {
  std::string path;
  bool force = false;
};

// Adds `-o,--output DIR` (described by `what`) and `--force`.
void addOutputDirectory(CLI::App& app, OutputDirectoryFlags& flags, const std::string& what);

// Nothing when no -o was given; else the opened (staged) output directory. `inputs` are the run's
// input files, which the directory may not hold.
Expected<std::optional<OutputDirectory>> openOutputDirectory(const OutputDirectoryFlags& flags,
                                                             std::vector<std::string> inputs);

} // namespace cleave::cli
