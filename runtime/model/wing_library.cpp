#include "runtime/model/wing_library.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <array>
#include <mutex>
#include <string>

#include "runtime/engine/device_wing.h"

namespace cleave::runtime {

namespace {

// A wing built as a library of its own, registered here by what it provides, so that asking for
// one of those names loads it (ONNX Runtime knows its provider libraries by name the same way).
struct WingLibrary {
  const char* wing;                 // as an error names it
  const char* file;                 // beside the runtime library
  std::string_view backendBase;     // its backends: `base` and `base:N` (device_wing.h's naming)
  std::string_view transport;       // the transport it registers, if any
  const char* backendNames;         // as usage lists them, before the library is loaded
};

constexpr std::array<WingLibrary, 1> kWingLibraries{{
    {"CUDA", kCudaWingLibrary, "aten-cuda", "nccl", "aten-cuda[:N]"},
}};

bool provides(const WingLibrary& library, std::string_view name) {
  return inNameFamily(name, library.backendBase) || (!library.transport.empty() && name == library.transport);
}

// The wing library that provides `name`, or none (a name the runtime itself provides).
const WingLibrary* providerOf(std::string_view name) {
  for (const WingLibrary& library : kWingLibraries)
    if (provides(library, name))
      return &library;
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
  // Each library is opened once; later asks get its first answer.
  static std::array<std::once_flag, kWingLibraries.size()> once;
  static std::array<Status, kWingLibraries.size()> loaded;
  const auto slot = static_cast<std::size_t>(library - kWingLibraries.data());
  std::call_once(once[slot], [&] { loaded[slot] = open(*library); });
  return loaded[slot];
}

std::optional<WingTransport> wingTransportOfBackend(std::string_view backend) {
  for (const WingLibrary& library : kWingLibraries)
    if (inNameFamily(backend, library.backendBase) && !library.transport.empty())
      return WingTransport{library.wing, library.backendBase, library.transport};
  return std::nullopt;
}

std::optional<WingTransport> wingTransportNamed(std::string_view transport) {
  for (const WingLibrary& library : kWingLibraries)
    if (!library.transport.empty() && library.transport == transport)
      return WingTransport{library.wing, library.backendBase, library.transport};
  return std::nullopt;
}

std::vector<std::string> wingLibraryBackendNames() {
  std::vector<std::string> names;
  for (const WingLibrary& library : kWingLibraries)
    names.emplace_back(library.backendNames);
  return names;
}

Status loadBackendWing(std::string_view backend) {
  // A bad index is refused by the naming rule, whether or not this build has the library.
  for (const WingLibrary& library : kWingLibraries)
    if (inNameFamily(backend, library.backendBase) && !deviceIndexInName(backend, library.backendBase))
      return deviceIndexError(backend, library.backendBase);
  if (Status loaded = loadWingProviding(backend); !loaded)
    return Error(ErrorCode::Unsupported) << "backend " << backend << ": " << loaded.error().message();
  return {};
}

} // namespace cleave::runtime
