// runtime/engine/torch_compat.h - small adapters over libtorch 2.x APIs that change between releases
// (autocast's state, c10's warning handler, c10::Allocator's virtuals), in one place, so that no
// other file depends on their spelling. cleave builds on one libtorch, PyPI's 2.11.
//
// Guarantees: AutocastScope turns on autocast (torch.autocast's thread-local state: the
// dispatcher's Autocast keys cast the inputs of matrix products and convolutions to `dtype`, and of
// precision-sensitive ops to float32) for `device` while it lives, restores the previous state
// after, and clears the weight-cast cache on leaving the outermost scope as torch.autocast's
// __exit__ does; activeAutocast says which dtype autocast casts to on `device` now (none: off).
// QuietWarnings silences c10's warnings on this thread while it lives, and restores the
// previous handler after; HostAllocatorBase is a c10::Allocator whose subclasses implement
// allocateBytes() once (2.x made allocate() non-const and copy_data() pure virtual: here it is a
// plain memcpy, as c10's default is).
// Complexity: none beyond the calls they forward.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <optional>

namespace cleave::runtime {

class QuietWarnings {
public:
  QuietWarnings() = default;
  QuietWarnings(const QuietWarnings&) = delete;
  QuietWarnings& operator=(const QuietWarnings&) = delete;

private:
  struct Handler : c10::WarningHandler {
    void process(const c10::Warning&) override {}
  } handler_; // declared before the guard that installs it
  c10::WarningUtils::WarningHandlerGuard guard_{&handler_};
};

class AutocastScope {
public:
  AutocastScope(c10::DeviceType device, c10::ScalarType dtype);
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;
  ~AutocastScope();

private:
  c10::DeviceType device_;
  bool wasEnabled_;
  c10::ScalarType previousType_;
};

std::optional<c10::ScalarType> activeAutocast(c10::DeviceType device);

class HostAllocatorBase : public c10::Allocator {
public:
  virtual c10::DataPtr allocateBytes(std::size_t bytes) const = 0;
  c10::DataPtr allocate(std::size_t bytes) override { return allocateBytes(bytes); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

} // namespace cleave::runtime
