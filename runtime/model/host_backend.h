// runtime/model/host_backend.h - the name of the backend every process has: ATen on the host's
// CPU (the CPU wing's), where a split's CPU side runs and what every command runs on by default.
// Torch-free (CMake's core-include check lists it), so the executable's options may name it.
// Guarantees: one spelling of the host backend's name in the project.
#pragma once

namespace cleave::runtime {

inline constexpr const char* kHostBackend = "aten-cpu";

} // namespace cleave::runtime
