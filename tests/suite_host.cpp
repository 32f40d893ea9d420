// tests/suite_host.cpp - runs a test suite that links the runtime (built as a library beside this
// executable, CLEAVE_SUITE_LIBRARY) the way the cleave executable runs its runtime library: the
// prebound libraries first (cli/prebind.h), then the suite with RTLD_GLOBAL, then its
// cleave_suite_main with this process's arguments. So the suites run oneDNN and libtorch bound
// as users' processes have them, not as one link of an executable would bind them.
// Exit: the suite's; 3 when the suite does not load (its dlerror on stderr).
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>

#include "cli/prebind.h"

int main(int argc, char** argv) {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string folder = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : std::string();
  folder = folder.substr(0, folder.rfind('/') + 1);
  cleave::cli::prebindRuntimeLibraries();
  void* suite = dlopen((folder + CLEAVE_SUITE_LIBRARY).c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (suite == nullptr) {
    std::fprintf(stderr, "suite_host: %s\n", dlerror());
    return 3;
  }
  auto entry = reinterpret_cast<int (*)(int, char**)>(dlsym(suite, "cleave_suite_main"));
  if (entry == nullptr) {
    std::fprintf(stderr, "suite_host: %s has no cleave_suite_main\n", CLEAVE_SUITE_LIBRARY);
    return 3;
  }
  return entry(argc, argv);
}
