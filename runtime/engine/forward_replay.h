// runtime/engine/forward_replay.h - a forward run again for its backward (activation
// recomputation), which must compute what the first run computed and change nothing it changed:
// it draws the random numbers the first run drew (dropout, from ATen's default CPU generator),
// and no kernel updates state a forward updates (BatchNormalization's running statistics:
// running_statistics.h).
//
// Guarantees: while a ForwardReplay lives, the generator is at the first run's state and
// replayingForward() is true on its thread; after, both are as they were (scopes nest).
// Complexity: a generator state is a few KB (the Mersenne Twister's); reading and setting copy it.
#pragma once

#include <ATen/ATen.h>

namespace cleave::runtime {

at::Tensor cpuGeneratorState();
void setCpuGeneratorState(const at::Tensor& state);

// Whether this thread is inside a ForwardReplay.
bool replayingForward();

class ForwardReplay {
public:
  // `drawsFrom`: the generator's state when the first run began.
  explicit ForwardReplay(const at::Tensor& drawsFrom);
  ForwardReplay(const ForwardReplay&) = delete;
  ForwardReplay& operator=(const ForwardReplay&) = delete;
  ~ForwardReplay();

private:
  at::Tensor savedDraws_;
  bool wasReplaying_;
};

} // namespace cleave::runtime
