#include "runtime/engine/device_wing.h"

#include <c10/util/Exception.h>

#include <array>
#include <stdexcept>

#include "runtime/engine/fast_paths.h"

namespace cleave::runtime {
namespace {

// Installed during static initialization, read afterwards: no lock (nothing installs later).
struct InstalledWings {
  std::array<const DeviceWing*, 4> wings{};
  std::size_t count = 0;
};

InstalledWings& installed() {
  static InstalledWings wings;
  return wings;
}

} // namespace

bool installWing(const DeviceWing& wing) {
  InstalledWings& all = installed();
  if (all.count == all.wings.size())
    return false;
  all.wings[all.count++] = &wing;
  return true;
}

const DeviceWing* wingServing(const at::Device& device) {
  const InstalledWings& all = installed();
  for (std::size_t i = 0; i < all.count; ++i)
    if (all.wings[i]->serves(device))
      return all.wings[i];
  return nullptr;
}

bool inPrivateLayout(const at::Tensor& t) {
  if (!t.defined())
    return false;
  const InstalledWings& all = installed();
  for (std::size_t i = 0; i < all.count; ++i)
    if (all.wings[i]->holdsPrivateLayout(t))
      return true;
  return false;
}

at::Tensor denseFromPrivateLayout(const at::Tensor& t) {
  if (!t.defined())
    return t;
  const InstalledWings& all = installed();
  for (std::size_t i = 0; i < all.count; ++i)
    if (all.wings[i]->holdsPrivateLayout(t))
      return all.wings[i]->dense(t);
  return t;
}

std::optional<Expected<BackendDevice>> backendDeviceNamed(std::string_view name) {
  const InstalledWings& all = installed();
  for (std::size_t i = 0; i < all.count; ++i)
    if (std::optional<Expected<BackendDevice>> named = all.wings[i]->backendDevice(name))
      return named;
  return std::nullopt;
}

std::vector<std::string> installedBackendNames() {
  const InstalledWings& all = installed();
  std::vector<std::string> names;
  for (std::size_t i = 0; i < all.count; ++i)
    for (std::string& name : all.wings[i]->backendNames())
      names.push_back(std::move(name));
  return names;
}

Status deviceUsable(const at::Device& device) {
  const DeviceWing* wing = wingServing(device);
  if (!wing)
    return Error(ErrorCode::Unsupported) << "no device wing serves " << device.str() << " in this build";
  return wing->usable(device);
}

std::optional<int> deviceIndexInName(std::string_view name, std::string_view base) {
  if (name == base)
    return 0;
  if (name.size() <= base.size() + 1 || name.size() > base.size() + 4 || name.substr(0, base.size()) != base ||
      name[base.size()] != ':')
    return std::nullopt;
  int index = 0;
  for (char c : name.substr(base.size() + 1)) {
    if (c < '0' || c > '9')
      return std::nullopt;
    index = index * 10 + (c - '0');
  }
  return index < 256 ? std::optional<int>(index) : std::nullopt;
}

std::optional<int> devicesNamedBy(std::string_view base) {
  const InstalledWings& all = installed();
  for (std::size_t i = 0; i < all.count; ++i)
    if (!base.empty() && all.wings[i]->indexedBackendBase() == base)
      return all.wings[i]->deviceCount();
  return std::nullopt;
}

bool inNameFamily(std::string_view name, std::string_view base) {
  return name == base || (name.size() > base.size() && name.substr(0, base.size()) == base && name[base.size()] == ':');
}

Error deviceIndexError(std::string_view name, std::string_view base) {
  return std::move(Error(ErrorCode::InvalidArgument) << "backend '" << name << "': expected " << base << " or "
                                                      << base << ":N, N a device's index (0 to 255)");
}

const FastPaths* fastPathsFor(const at::Device& device) {
  const DeviceWing* wing = wingServing(device);
  return wing ? wing->fastPaths() : nullptr;
}

std::size_t wingHeldWeightBytes() {
  const InstalledWings& all = installed();
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < all.count; ++i)
    bytes += all.wings[i]->heldWeightBytes();
  return bytes;
}

std::int64_t devicePeakAllocatedBytes(const at::Device& device) {
  const DeviceWing* wing = wingServing(device);
  return wing ? wing->peakAllocatedBytes(device) : -1;
}

void synchronizeDevice(const at::Device& device) {
  if (const DeviceWing* wing = wingServing(device))
    wing->synchronize(device);
}

Expected<std::unique_ptr<DeviceRecording>> DeviceWing::record(const at::Device& device,
                                                              const std::function<Status()>&) const {
  return Error(ErrorCode::Unsupported) << "the " << name() << " wing records no device work (device "
                                       << device.str() << "): graph replay needs a CUDA device";
}

namespace {
thread_local bool recordingOnThisThread = false;
} // namespace

RecordingScope::RecordingScope() : previous_(recordingOnThisThread) { recordingOnThisThread = true; }
RecordingScope::~RecordingScope() { recordingOnThisThread = previous_; }
bool insideRecording() { return recordingOnThisThread; }

Status callWhileRecording(const std::function<Status()>& work) {
  std::string failure;
  {
    RecordingScope recording;
    try {
      if (Status status = work(); !status)
        failure = status.error().message();
    } catch (const c10::Error& e) {
      failure = e.what_without_backtrace();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  if (failure.empty())
    return {};
  return Error(ErrorCode::Unsupported) << "the device refused to record a run: " << failure.substr(0, failure.find('\n'));
}

Expected<std::unique_ptr<DeviceRecording>> recordDeviceWork(const at::Device& device,
                                                            const std::function<Status()>& work) {
  const DeviceWing* wing = wingServing(device);
  if (!wing)
    return Error(ErrorCode::Unsupported) << "no device wing serves " << device.str() << ": nothing records its work";
  return wing->record(device, work);
}

void resetDevicePeakAllocatedBytes(const at::Device& device) {
  if (const DeviceWing* wing = wingServing(device))
    wing->resetPeakAllocatedBytes(device);
}

} // namespace cleave::runtime
