#include "runtime/engine/torch_compat.h"

#include <ATen/autocast_mode.h>

namespace cleave::runtime {

namespace {
bool autocastEnabled(c10::DeviceType device) { return at::autocast::is_autocast_enabled(device); }
void setAutocastEnabled(c10::DeviceType device, bool on) { at::autocast::set_autocast_enabled(device, on); }
c10::ScalarType autocastType(c10::DeviceType device) { return at::autocast::get_autocast_dtype(device); }
void setAutocastType(c10::DeviceType device, c10::ScalarType type) { at::autocast::set_autocast_dtype(device, type); }
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
