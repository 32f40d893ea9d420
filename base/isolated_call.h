// base/isolated_call.h - run code that may crash or hang on bad input (third-party libraries:
// libonnx's shape inference and version converter) in a forked child process.
//
// Guarantee: whatever `body` does - returns, throws, crashes, or runs past `seconds` - the caller
// gets an Expected: the body's result string, or an Error naming `what` ("WHAT failed: <exception>",
// "WHAT crashed on this input (signal N)", "WHAT did not finish in N s"). The child shares nothing
// back but the result bytes (a pipe) and leaves with _exit, so no atexit handler or destructor of
// the parent's state runs twice. Complexity: one fork (copy-on-write; page tables only) per call.
// Caveat: the child runs `body` in a copy of a possibly multi-threaded process; `body` must only
// use state that no other thread holds a lock on (cleave reads models before any pool starts).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "base/expected.h"

namespace cleave {

Expected<std::string> runIsolated(std::string_view what, const std::function<std::string()>& body,
                                  unsigned seconds = 120);

} // namespace cleave
