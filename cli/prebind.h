// cli/prebind.h - binds, before libtorch is loaded, the libraries of the runtime that must keep
// their own symbols: Debian's libdnnl (the CPU wing's oneDNN). libtorch_cpu carries another
// oneDNN, and both export, under identical names, the std::call_once thunks that initialize
// oneDNN's GEMM kernels (std's templates have default visibility): loaded in one group, every
// caller binds to the first copy, so the other oneDNN's GEMM is never initialized and fails
// (measured: libdnnl's dnnl_sgemm returned an error beside torch 2.11). Loaded first and
// RTLD_LOCAL, with every symbol bound now, libdnnl binds its own; it is then not in the global
// scope when libtorch_cpu binds, so libtorch binds its own too. tests/libraries_test.py asserts
// that no symbol binds across the two.
//
// Used by the executable before it loads the runtime library (cli/runtime_link.cpp) and by the
// test host that loads the runtime's test suites the same way (tests/suite_host.cpp).
// Complexity: one dlopen per library (a failure is left to the runtime library's own load,
// which names the missing library).
#pragma once

#include <dlfcn.h>

#include "cli/build_info.h"

namespace cleave::cli {

inline void prebindRuntimeLibraries() {
  for (const char* library : build_info::kPreboundLibraries)
    if (*library)
      dlopen(library, RTLD_NOW | RTLD_LOCAL);
}

} // namespace cleave::cli
