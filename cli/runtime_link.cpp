// cli/runtime_link.cpp - the executable's side of the runtime library (cli/runtime_library.h):
// loading it, and the running commands, which it runs.
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstring>

#include "cli/prebind.h"
#include "cli/runtime_library.h"

namespace cleave::cli {

// The folder of the running executable, with its trailing slash (empty when unknown).
std::string executableFolder() {
  char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0)
    return "";
  std::string text(path, static_cast<std::size_t>(n));
  return text.substr(0, text.rfind('/') + 1);
}

namespace {
Expected<const RuntimeLibrary*> openRuntimeLibrary() {
  prebindRuntimeLibraries();
  std::string path = executableFolder() + "libcleave_runtime.so";
  // RTLD_NOW: a missing symbol fails here, in one line, not at some later call. RTLD_GLOBAL: a
  // device wing's library, loaded later (runtime/model/wing_library.h), resolves the engine's
  // symbols against this one.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle)
    return Error(ErrorCode::NotFound) << "cannot load the runtime library: " << dlerror();
  auto entry = reinterpret_cast<const RuntimeLibrary* (*)()>(dlsym(handle, "cleave_runtime_library"));
  if (!entry)
    return Error(ErrorCode::InvalidArgument) << path << " is not cleave's runtime library (no cleave_runtime_library)";
  const RuntimeLibrary* library = entry();
  if (library->version != kRuntimeLibraryVersion)
    return Error(ErrorCode::InvalidArgument) << path << " is version " << library->version << ", this cleave needs "
                                             << kRuntimeLibraryVersion << " (rebuild both together)";
  return library; // never closed: libtorch's state lives until the process ends
}

// A running command: its body from the library, under the executable's name and summary.
int runInRuntimeLibrary(const Command& command, const Args& args, std::ostream& out, std::ostream& err) {
  Expected<const RuntimeLibrary*> library = loadRuntimeLibrary();
  if (!library) {
    err << "cleave " << command.name << ": error: " << library.error().message() << "\n";
    return kExitRejected;
  }
  for (const CommandBody* body : (*library)->commands)
    if (std::strcmp(body->name, command.name) == 0)
      return body->run(command, args, out, err);
  err << "cleave " << command.name << ": error: the runtime library has no command '" << command.name << "'\n";
  return kExitRejected;
}
} // namespace

Expected<const RuntimeLibrary*> loadRuntimeLibrary() {
  static const Expected<const RuntimeLibrary*> loaded = openRuntimeLibrary();
  return loaded;
}

const Command kRunCommand{"run",
                          "run a model or a cut model on ATen; output summaries and timings",
                          runInRuntimeLibrary};
const Command kVerifyCommand{"verify",
                             "check that a cut model computes what the original does",
                             runInRuntimeLibrary};
const Command kShapesCommand{"shapes",
                             "record every value's dtype and shape from a run on sample inputs",
                             runInRuntimeLibrary};
const Command kMinimizeCommand{"minimize",
                               "find the smallest node set where one backend fails or disagrees with another",
                               runInRuntimeLibrary};
const Command kTrainCommand{"train",
                            "train a model exported with its loss (ATen autograd, PyTorch's optimizers)",
                            runInRuntimeLibrary};
const Command kLaunchCommand{"launch",
                             "start N ranks of a command (torchrun's variables); stop all when one fails",
                             runInRuntimeLibrary};

} // namespace cleave::cli
