#include "runtime/engine/forward_replay.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

namespace cleave::runtime {

namespace {
thread_local bool replaying = false;
} // namespace

at::Tensor cpuGeneratorState() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void setCpuGeneratorState(const at::Tensor& state) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

bool replayingForward() { return replaying; }

ForwardReplay::ForwardReplay(const at::Tensor& drawsFrom) : savedDraws_(cpuGeneratorState()), wasReplaying_(replaying) {
  setCpuGeneratorState(drawsFrom);
  replaying = true;
}

ForwardReplay::~ForwardReplay() {
  setCpuGeneratorState(savedDraws_);
  replaying = wasReplaying_;
}

} // namespace cleave::runtime
