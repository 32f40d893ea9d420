// runtime/engine/torch_compat.h - the libtorch API differences between Debian's 1.13 (this machine, CI) and
// PyTorch 2.x (the GPU machine's 2.11), in one place, so that no other file branches on the version.
//
// Guarantees: AutocastScope turns on autocast (torch.autocast's thread-local state: the
// dispatcher's Autocast keys cast the inputs of matrix products and convolutions to `dtype`, and of
// precision-sensitive ops to float32) for `device` while it lives, restores the previous state
// after, and clears the weight-cast cache on leaving the outermost scope as torch.autocast's
// __exit__ does; activeAutocast says which dtype autocast casts to on `device` now (none: off).
// QuietWarnings silences c10's warnings on this thread while it lives, and restores the
// previous handler after; HostAllocatorBase is a c10::Allocator whose subclasses implement
// allocateBytes() once for both APIs (2.x made allocate() non-const and copy_data() pure virtual:
// here it is a plain memcpy, as c10's default is).
// Complexity: none beyond the calls they forward.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <optional>
#include <string>

namespace cleave::runtime {

class QuietWarnings {
public:
  QuietWarnings() = default;
  QuietWarnings(const QuietWarnings&) = delete;
  QuietWarnings& operator=(const QuietWarnings&) = delete;

private:
  struct Handler : c10::WarningHandler {
#if TORCH_VERSION_MAJOR >= 2
    void process(const c10::Warning&) override {}
#else
    void process(const c10::SourceLocation&, const std::string&, const bool) override {}
#endif
  } handler_; // declared before the guard that installs it
#if TORCH_VERSION_MAJOR >= 2
  c10::WarningUtils::WarningHandlerGuard guard_{&handler_};
#else
  c10::Warning::WarningHandlerGuard guard_{&handler_};
#endif
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
#if TORCH_VERSION_MAJOR >= 2
  c10::DataPtr allocate(std::size_t bytes) override { return allocateBytes(bytes); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(std::size_t bytes) const override { return allocateBytes(bytes); }
#endif
};

} // namespace cleave::runtime
