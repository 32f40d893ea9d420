// cli/version.h - `cleave --version`: what this build was made with (cli/build_info.h.in) and
// whether its CUDA wing is there to load, read without loading libtorch. O(1); one stat call.
#pragma once

#include <ostream>

namespace cleave::cli {

// Writes one line per component: cleave, libtorch (and its CUDA), ONNX, oneDNN, and the CUDA
// wing: "present" with its file beside the executable, "missing" when the build made it but the
// file is gone, or "absent" with why.
void printVersion(std::ostream& out);

} // namespace cleave::cli
