#include "runtime/model/plan_backends.h"

namespace cleave::runtime {

Expected<const Backend*> PlanBackends::of(const PlacedSubmodule& sub) {
  if (sub.backend.empty())
    return plan::runsOnAccelerator(sub.role) ? &acc_ : &cpu_;
  if (sub.backend == acc_.name())
    return &acc_;
  if (sub.backend == cpu_.name())
    return &cpu_;
  auto made = made_.find(sub.backend);
  if (made == made_.end()) {
    Expected<std::unique_ptr<Backend>> backend = makeBackend(sub.backend, optimizations_);
    if (!backend)
      return Error(backend.error().code()) << "submodule '" << sub.name << "' runs on device " << sub.device
                                           << ", whose backend fails: " << backend.error().message();
    made = made_.emplace(sub.backend, std::move(*backend)).first;
  }
  return made->second.get();
}

} // namespace cleave::runtime
