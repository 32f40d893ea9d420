// runtime/engine/optimizations.h - the runtime's optimizations a run may turn off, as plain flags,
// and the switches a device wing declares for its own (WingSwitch). It includes nothing of ATen,
// so that the cleave executable parses them (cli/runtime_options.h) without loading the runtime
// library. O(1) but for WingSwitches, whose lookups scan the switches a run set (a handful).
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "base/enum_table.h"

namespace cleave::runtime {

// The precision a model computes in. Fp16 and Bf16 are PyTorch's mixed precision,
// torch.autocast(dtype=...) on the run's device: ATen's autocast dispatch keys cast the operands
// of matrix products, convolutions and attention to the half type and those of the ops the device's
// autocast lists as precision-sensitive (softmax, norms, reductions on CUDA) to float32; other ops
// run in the type their operands arrive in. Parameters stay float32 (each half copy is autocast's
// weight cache, kept for one run) and a graph's floating outputs come back in their declared types.
// This differs from the aten-cpu-bf16 backend, which casts every parameter and input to bfloat16
// and computes everything in it.
enum class Precision : std::uint8_t { Fp32, Fp16, Bf16 };
inline constexpr auto kPrecisions =
    enumTable<Precision>({{Precision::Fp32, "fp32"}, {Precision::Fp16, "fp16"}, {Precision::Bf16, "bf16"}});

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
  // Not an optimization a run turns off but, like TF32, a trade of precision for speed that every
  // executor of a run shares (cleave run/verify/split --precision): mixed precision.
  Precision precision = Precision::Fp32;
};

} // namespace cleave::runtime
