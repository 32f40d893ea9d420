#include "cli/output_options.h"

namespace cleave::cli {

void addOutputDirectory(CLI::App& app, OutputDirectoryFlags& flags, const std::string& what) {
  app.add_option("-o,--output", flags.path,
                 what + " (written whole or not at all; an existing DIR is replaced only if it is empty "
                        "or an earlier cleave output)");
  app.add_flag("--force", flags.force,
               "replace -o DIR even if it holds files cleave did not write (never '.', '..', '/', the "
               "home folder or a folder holding an input)");
}

Expected<std::optional<OutputDirectory>> openOutputDirectory(const OutputDirectoryFlags& flags,
                                                             std::vector<std::string> inputs) {
  if (flags.path.empty())
    return std::optional<OutputDirectory>();
  OutputDirectoryOptions options{.force = flags.force, .inputs = std::move(inputs)};
  CLEAVE_TRY(OutputDirectory directory, OutputDirectory::open(flags.path, options));
  return std::optional<OutputDirectory>(std::move(directory));
}

} // namespace cleave::cli
