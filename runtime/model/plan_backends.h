// runtime/model/plan_backends.h - the backend each submodule of a loaded plan runs on: the one its
// device names (plan.json's "device_backends"), made once per name, or, where its device names
// none, the caller's by role (accelerator submodules and partitions on `acc`, the rest on `cpu`).
// CutModel places inference on it and the pipeline trainer its stages, so both read a plan's
// placement alike.
// Guarantees: the backends it makes live as long as it does; a name equal to `acc`'s or `cpu`'s
// is those. Complexity: O(log backends) per submodule, plus making each named backend once.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "runtime/model/backend.h"
#include "runtime/model/loaded_plan.h"

namespace cleave::runtime {

class PlanBackends {
public:
  PlanBackends(const Backend& acc, const Backend& cpu, Optimizations optimizations)
      : acc_(acc), cpu_(cpu), optimizations_(optimizations) {}
  // Fails: what makeBackend fails with (an unknown name, a profile that does not load), naming
  // the submodule and its device.
  Expected<const Backend*> of(const PlacedSubmodule& sub);

private:
  const Backend& acc_;
  const Backend& cpu_;
  Optimizations optimizations_;
  std::map<std::string, std::unique_ptr<Backend>> made_;
};

} // namespace cleave::runtime
