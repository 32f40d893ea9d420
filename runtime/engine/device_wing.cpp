#include "runtime/engine/device_wing.h"

#include <array>

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
  const InstalledWings& all = installed();
  for (std::size_t i = 0; i < all.count; ++i)
    if (all.wings[i]->holdsPrivateLayout(t))
      return true;
  return false;
}

at::Tensor denseFromPrivateLayout(const at::Tensor& t) {
  const InstalledWings& all = installed();
  for (std::size_t i = 0; i < all.count; ++i)
    if (all.wings[i]->holdsPrivateLayout(t))
      return all.wings[i]->dense(t);
  return t;
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
