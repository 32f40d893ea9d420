#include "runtime/engine/forward_replay.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <mutex>

namespace cleave::runtime {

namespace {
thread_local bool replaying = false;
thread_local bool evaluating = false;

// The CUDA generator of the current device; undefined without CUDA (nothing is loaded to ask).
at::Generator cudaGenerator() {
  if (!at::hasCUDA())
    return {};
  return at::globalContext().defaultGenerator(at::Device(at::kCUDA));
}

at::Tensor stateOf(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void setState(at::Generator generator, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}
} // namespace

GeneratorStates generatorStates() {
  GeneratorStates states{stateOf(at::detail::getDefaultCPUGenerator()), {}};
  if (at::Generator cuda = cudaGenerator(); cuda.defined())
    states.cuda = stateOf(cuda);
  return states;
}

void setGeneratorStates(const GeneratorStates& states) {
  if (states.cpu.defined())
    setState(at::detail::getDefaultCPUGenerator(), states.cpu);
  if (at::Generator cuda = states.cuda.defined() ? cudaGenerator() : at::Generator(); cuda.defined())
    setState(cuda, states.cuda);
}

void seedGenerators(std::uint64_t seed) {
  for (at::Generator generator : {at::detail::getDefaultCPUGenerator(), cudaGenerator()}) {
    if (!generator.defined())
      continue;
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_current_seed(seed);
  }
}

bool replayingForward() { return replaying; }

ForwardReplay::ForwardReplay(const GeneratorStates& drawsFrom)
    : savedDraws_(generatorStates()), wasReplaying_(replaying) {
  setGeneratorStates(drawsFrom);
  replaying = true;
}

ForwardReplay::~ForwardReplay() {
  setGeneratorStates(savedDraws_);
  replaying = wasReplaying_;
}

bool evaluatingForward() { return evaluating; }

ForwardEvaluation::ForwardEvaluation() : wasEvaluating_(evaluating) { evaluating = true; }

ForwardEvaluation::~ForwardEvaluation() { evaluating = wasEvaluating_; }

} // namespace cleave::runtime
