// runtime/engine/optimizations.h - the runtime's optimizations a run may turn off, as plain flags,
// and the switches a device wing declares for its own (WingSwitch). It includes nothing of ATen,
// so that the cleave executable parses them (cli/runtime_options.h) without loading the runtime
// library. O(1) but for WingSwitches, whose lookups scan the switches a run set (a handful).
#pragma once

#include <string_view>
#include <utility>
#include <vector>

namespace cleave::runtime {

// An optimization a device wing offers and lets a run turn on or off, declared by the wing in a
// header of constants (runtime/cpu/cpu_switches.h, runtime/cuda/cuda_switches.h) that the CLI
// reads to make its flags: `--no-NAME` for a switch on by default, `--NAME` for one off.
struct WingSwitch {
  std::string_view name; // the flag's name ("winograd")
  bool byDefault;
  std::string_view help; // what the flag does, for --help
};

// The wing switches a run set, by declaration; every other one keeps its default.
class WingSwitches {
public:
  void set(const WingSwitch& which, bool on) {
    for (auto& [name, value] : set_)
      if (name == which.name) {
        value = on;
        return;
      }
    set_.emplace_back(which.name, on);
  }
  bool isOn(const WingSwitch& which) const {
    for (const auto& [name, value] : set_)
      if (name == which.name)
        return value;
    return which.byDefault;
  }

private:
  // Names point into the declarations, constants of static storage.
  std::vector<std::pair<std::string_view, bool>> set_;
};

// Optimizations a run may turn off, to measure what each one gives or to rule it out when
// debugging (cleave run --no-fusion / --no-blocked-layout). Results agree either way, up to
// float rounding.
struct Optimizations {
  bool fusion = true; // run fused node groups (fusion.h) as one kernel each
  // Among them, attention (MatMul, scale, masks, Softmax, MatMul) as one fused attention call
  // (cleave run --no-fused-attention: its nodes one by one, fused as the others allow).
  bool fusedAttention = true;
  // Keep values in the private layout of the wing serving the device between the ops that read it
  // (device_wing.h; the CPU wing's blocked convolution activations) while every reader takes it.
  bool blockedLayout = true;
  // Reuse the results of small pure ops (shape arithmetic) whose operands repeat from the last run
  // (small_op_memo.h; cleave run --no-shape-memo).
  bool rememberShapeArithmetic = true;
  // Not the executor's: a cut model's neighbouring submodules on one backend run as one joined
  // graph, fusing across their seams (cut_model.h).
  bool joinSeams = true;
  // The wings' own (the CPU wing's weight layouts and convolution kernels, the CUDA wing's TF32).
  WingSwitches wing;
};

} // namespace cleave::runtime
