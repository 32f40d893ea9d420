// runtime/model/backend.h - where a (sub)model runs: lower it once, run it many times.
//
// A backend is named by the device wing that answers to the name (DeviceWing::backendDevice), so
// adding a device adds its names here without an edit: today
//   aten-cpu       the ATen executor on the CPU (the CPU wing)
//   aten-cpu-bf16  the ATen executor on the CPU computing in bfloat16 (floating inputs and
//                  parameters cast, outputs cast back to float32): a low-precision device whose
//                  disagreements exercise verify, preview and minimize (the CPU wing)
//   aten-cpu-as-gpu  the ATen executor on the CPU with host and device memory kept apart as on a
//                  GPU: values placed and copies counted as a GPU run makes them, by value
//                  (run --profile), so steady-state crossings show without a GPU (the CPU wing)
//   aten-cuda      the ATen executor on CUDA device 0, aten-cuda:N on device N (the CUDA wing, a
//                  library of its own: a build against a libtorch without CUDA has none)
// and, whatever the wings:
//   profile:FILE   refuses, at lowering, any node the support profile FILE does not support
//                  (naming the node and the profile's reason), else runs like aten-cpu: a
//                  stand-in accelerator to exercise failure paths. The shape prologue split
//                  keeps with an acc submodule (split/shape_prologue.h) runs on its host.
// Outputs stay on the backend's device; callers move values where the next module needs them.
// Complexity: lowering is linear in the graph plus loading parameters once; a run is the
// executor's (runtime/engine/executor.h: O(V + E) besides the kernels).
#pragma once

#include <memory>
#include <string>

#include "runtime/engine/executor.h"
#include "support/profile.h"

namespace cleave::runtime {

class LoweredModule {
public:
  virtual ~LoweredModule() = default;
  // `observe`, when given, sees every value made (Executor::Observer); `outputLayout` as
  // Executor::run's.
  virtual Expected<TensorMap> run(const TensorMap& inputs, RunStats* stats = nullptr,
                                  const Executor::Observer* observe = nullptr,
                                  OutputLayout outputLayout = OutputLayout::Dense) = 0;
  virtual at::Device device() const = 0;
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual const std::string& name() const = 0;
  // The device its modules run on.
  virtual at::Device device() const = 0;
  // Whether its modules keep host and device memory apart (a GPU; aten-cpu-as-gpu on the CPU):
  // values cross between them, and a recording of its device work checks that none does.
  virtual bool keepsHostMemoryApart() const { return !device().is_cpu(); }
  // Fails: Unsupported (an op this backend cannot run, named with its node).
  virtual Expected<std::unique_ptr<LoweredModule>> lower(std::shared_ptr<const ir::Graph> graph) const = 0;
  // The graph as a trainable executor on this backend's device (ExecutorOptions::trainable: its
  // floating parameters are leaves that gather gradients; runtime/training/). Fails like lower,
  // and Unsupported where the backend does not train (a low-precision one: training in bfloat16
  // wants float32 master weights, which it does not keep).
  virtual Expected<std::unique_ptr<Executor>> lowerTrainable(std::shared_ptr<const ir::Graph> graph) const = 0;
};

// The device (and float type) backend `spec` means: the installed wing that answers to the name
// says (device_wing.h), after loading the wing library that provides it, if one does
// (wing_library.h); profile:FILE runs on the CPU. No other code parses a device's name.
// Fails: InvalidArgument (unknown backend name, an index that names no device), Unsupported (its
// wing library is not in this build or does not load).
Expected<BackendDevice> backendDevice(const std::string& spec);

// Fails: what backendDevice fails with, what loading the profile fails with; Usage for mixed
// precision (optimizations.precision) on a backend with a float type of its own (aten-cpu-bf16).
Expected<std::unique_ptr<Backend>> makeBackend(const std::string& spec, const Optimizations& optimizations = {});

} // namespace cleave::runtime
