// runtime/model/wing_library.h - device wings built as libraries of their own, loaded on first
// use of what they provide, as ONNX Runtime loads its execution providers' libraries. Today one:
// the CUDA wing, libcleave_cuda.so (runtime/cuda/), which provides the aten-cuda backends and the
// nccl transport and links libtorch_cuda, cuDNN, cuBLAS and NCCL; a process that never asks for
// them never maps those libraries (a command on the CPU starts as fast as without CUDA).
//
// Guarantees: a library is looked for beside the object that holds this code (the runtime
// library, libcleave_runtime.so, which the executable loads with RTLD_GLOBAL so that the wing
// resolves installWing and registerTransport against it) and loaded at most once per process;
// loading runs its static registrations. A test binary that links the runtime statically exports
// none of those symbols, so a wing library does not load there (the error says so).
// The file name below is plain text, so the executable names the wing (`cleave --version`)
// without loading the runtime. Complexity: O(length of the name) after the first load; the load
// is dlopen's.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.h"

namespace cleave::runtime {

// The CUDA wing's library, beside the runtime library (CMakeLists.txt builds it by this name).
inline constexpr const char* kCudaWingLibrary = "libcleave_cuda.so";

// Loads the wing library that provides `name` (a backend name such as "aten-cuda:1", or a
// transport name such as "nccl"); nothing to do when no wing library provides it.
// Fails: Unsupported naming the library when this build has none beside the runtime library
// (a libtorch without CUDA) or when it does not load (dlerror's line).
Status loadWingProviding(std::string_view name);

// What a wing library declares of the transport that moves its devices' tensors without leaving
// them: the CUDA wing's aten-cuda[:N] talk over nccl. Plain text: nothing is loaded to answer.
struct WingTransport {
  std::string_view wing;        // as errors name it ("CUDA")
  std::string_view backendBase; // its backends' base name ("aten-cuda")
  std::string_view transport;   // "nccl"
};
// The transport of the wing library providing backend `backend`; none where no wing library
// provides it (the host's backends, which talk over the host transport).
std::optional<WingTransport> wingTransportOfBackend(std::string_view backend);
// The wing library that registers transport `transport`; none where none does.
std::optional<WingTransport> wingTransportNamed(std::string_view transport);

// The backend names the wing libraries provide, as usage lists them ("aten-cuda[:N]"), whether
// loaded or not.
std::vector<std::string> wingLibraryBackendNames();

// loadWingProviding for backend `backend`, its failure said as the backend's ("backend
// aten-cuda: ..."). Call it before anything asks ATen about CUDA: libtorch keeps its first answer.
Status loadBackendWing(std::string_view backend);

} // namespace cleave::runtime
