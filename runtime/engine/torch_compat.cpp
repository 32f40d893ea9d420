#include "runtime/engine/torch_compat.h"

#include <ATen/autocast_mode.h>

namespace cleave::runtime {

namespace {
#if TORCH_VERSION_MAJOR >= 2
bool autocastEnabled(c10::DeviceType device) { return at::autocast::is_autocast_enabled(device); }
void setAutocastEnabled(c10::DeviceType device, bool on) { at::autocast::set_autocast_enabled(device, on); }
c10::ScalarType autocastType(c10::DeviceType device) { return at::autocast::get_autocast_dtype(device); }
void setAutocastType(c10::DeviceType device, c10::ScalarType type) { at::autocast::set_autocast_dtype(device, type); }
#else
// 1.13 keeps one switch and one dtype for the CPU and one for CUDA.
bool autocastEnabled(c10::DeviceType device) {
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
void setAutocastEnabled(c10::DeviceType device, bool on) {
  if (device == c10::DeviceType::CPU)
    at::autocast::set_cpu_enabled(on);
  else
    at::autocast::set_enabled(on);
}
c10::ScalarType autocastType(c10::DeviceType device) {
  return device == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
}
void setAutocastType(c10::DeviceType device, c10::ScalarType type) {
  if (device == c10::DeviceType::CPU)
    at::autocast::set_autocast_cpu_dtype(type);
  else
    at::autocast::set_autocast_gpu_dtype(type);
}
#endif
} // namespace

std::optional<c10::ScalarType> activeAutocast(c10::DeviceType device) {
  return autocastEnabled(device) ? std::optional<c10::ScalarType>(autocastType(device)) : std::nullopt;
}

AutocastScope::AutocastScope(c10::DeviceType device, c10::ScalarType dtype)
    : device_(device), wasEnabled_(autocastEnabled(device)), previousType_(autocastType(device)) {
  setAutocastEnabled(device, true);
  setAutocastType(device, dtype);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (at::autocast::decrement_nesting() == 0)
    at::autocast::clear_cache();
  setAutocastEnabled(device_, wasEnabled_);
  setAutocastType(device_, previousType_);
}

} // namespace cleave::runtime
