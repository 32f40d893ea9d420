#include "runtime/engine/generator_state.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

namespace cleave::runtime {

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

} // namespace cleave::runtime
