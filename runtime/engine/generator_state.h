// runtime/engine/generator_state.h - the state of ATen's default CPU generator, which dropout and
// torch's other random ops draw from: read it, set it, and run something on a saved state.
//
// Guarantees: ReplayedDraws makes a second run of the same ops draw what the first drew (a
// recomputed segment with a Dropout in it: recompute.h), and leaves the generator as it found it.
// Complexity: a state is a few KB (the Mersenne Twister's); reading and setting copy it.
#pragma once

#include <ATen/ATen.h>

namespace cleave::runtime {

at::Tensor cpuGeneratorState();
void setCpuGeneratorState(const at::Tensor& state);

// While it lives, the generator is at `state`; after, where it was before.
class ReplayedDraws {
public:
  explicit ReplayedDraws(const at::Tensor& state) : saved_(cpuGeneratorState()) { setCpuGeneratorState(state); }
  ReplayedDraws(const ReplayedDraws&) = delete;
  ReplayedDraws& operator=(const ReplayedDraws&) = delete;
  ~ReplayedDraws() { setCpuGeneratorState(saved_); }

private:
  at::Tensor saved_;
};

} // namespace cleave::runtime
