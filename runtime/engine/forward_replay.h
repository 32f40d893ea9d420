// runtime/engine/forward_replay.h - the random generators a forward draws from, and a forward run
// again for its backward (activation recomputation), which must compute what the first run
// computed and change nothing it changed: it draws the random numbers the first run drew
// (dropout), and no kernel updates state a forward updates (BatchNormalization's running
// statistics: running_statistics.h).
//
// The generators are ATen's default CPU generator and, where the CUDA wing has loaded CUDA
// (at::hasCUDA()), the current device's default CUDA generator; a process on the CPU alone never
// touches CUDA here.
// Guarantees: while a ForwardReplay lives, the generators are at the first run's states and
// replayingForward() is true on its thread; after, all are as they were (scopes nest).
// Complexity: a generator state is a few KB (the Mersenne Twister's; Philox's is 16 bytes);
// reading and setting copy it.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace cleave::runtime {

struct GeneratorStates {
  at::Tensor cpu, cuda; // cuda: undefined without CUDA
};

GeneratorStates generatorStates();
// Sets each generator whose state `states` holds.
void setGeneratorStates(const GeneratorStates& states);
// Seeds every generator a forward draws from with `seed`.
void seedGenerators(std::uint64_t seed);

// Whether this thread is inside a ForwardReplay.
bool replayingForward();

class ForwardReplay {
public:
  // `drawsFrom`: the generators' states when the first run began.
  explicit ForwardReplay(const GeneratorStates& drawsFrom);
  ForwardReplay(const ForwardReplay&) = delete;
  ForwardReplay& operator=(const ForwardReplay&) = delete;
  ~ForwardReplay();

private:
  GeneratorStates savedDraws_;
  bool wasReplaying_;
};

// Held-out evaluation (cleave train --eval-data): while a ForwardEvaluation lives on a thread, the
// forwards it runs are torch's model.eval() ones: Dropout passes its input through, and a
// BatchNormalization exported in training mode normalizes by its running statistics and leaves
// them as they are. Scopes nest.
bool evaluatingForward();

class ForwardEvaluation {
public:
  ForwardEvaluation();
  ForwardEvaluation(const ForwardEvaluation&) = delete;
  ForwardEvaluation& operator=(const ForwardEvaluation&) = delete;
  ~ForwardEvaluation();

private:
  bool wasEvaluating_;
};

} // namespace cleave::runtime
