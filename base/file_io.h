// base/file_io.h - whole-file reads and crash-safe writes.
// Every file and output directory cleave writes goes through here: data is written to a
// temporary name in the destination's directory and renamed into place, so a reader never sees
// a half-written file and a failure leaves nothing behind.
#pragma once

#include <string>
#include <string_view>

#include "base/expected.h"

namespace cleave {

Expected<std::string> readFile(const std::string& path);
Status writeFileAtomically(const std::string& path, std::string_view contents);

// Creates an empty sibling directory of `finalDir` to fill; commitDirectory() renames it into
// place (replacing an existing directory of that name), discardDirectory() removes it.
Expected<std::string> makeStagingDirectory(const std::string& finalDir);
Status commitDirectory(const std::string& stagingDir, const std::string& finalDir);
void discardDirectory(const std::string& stagingDir);

} // namespace cleave
