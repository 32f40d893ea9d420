#include "runtime/model/wing_library.h"

#include "runtime/model/backend_names.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <mutex>
#include <string>

namespace cleave::runtime {

namespace {

struct WingLibrary {
  const char* wing; // as an error names it
  const char* file; // beside the runtime library
};

constexpr WingLibrary kCudaWing{"CUDA", kCudaWingLibrary};

// The wing library that provides `name`, or none (a name the runtime itself provides).
const WingLibrary* providerOf(std::string_view name) {
  if (name == "nccl" || isCudaBackend(name))
    return &kCudaWing;
  return nullptr;
}

// The folder of the object that holds this code, with its trailing slash.
std::string ownFolder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&providerOf), &info) == 0 || info.dli_fname == nullptr)
    return "";
  std::string path = info.dli_fname;
  return path.substr(0, path.rfind('/') + 1);
}

Status open(const WingLibrary& library) {
  const std::string path = ownFolder() + library.file;
  struct stat info {};
  if (stat(path.c_str(), &info) != 0)
    return Error(ErrorCode::Unsupported) << "this build has no " << library.wing << " wing (no " << path
                                         << "; build against a libtorch with " << library.wing << ")";
  // Never closed: its registrations, and libtorch_cuda's, live until the process ends.
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr)
    return Error(ErrorCode::Unsupported) << "the " << library.wing << " wing (" << path
                                         << ") does not load: " << dlerror();
  return {};
}

} // namespace

Status loadWingProviding(std::string_view name) {
  const WingLibrary* library = providerOf(name);
  if (library == nullptr)
    return {};
  // One library today; a second would get its own flag and result.
  static std::once_flag once;
  static Status loaded;
  std::call_once(once, [&] { loaded = open(*library); });
  return loaded;
}

Status loadBackendWing(std::string_view backend) {
  if (Status loaded = loadWingProviding(backend); !loaded)
    return Error(ErrorCode::Unsupported) << "backend " << backend << ": " << loaded.error().message();
  return {};
}

} // namespace cleave::runtime
