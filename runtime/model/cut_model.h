// runtime/model/cut_model.h - a cut model (a plan.json directory from split or partition) as one
// runnable thing: its submodels lowered onto backends, run in plan order, each fed from the
// graph inputs and earlier submodels' outputs (moved to the submodel's device), values dropped
// once no later submodel reads them. The plan is loaded as a LoadedPlan (loaded_plan.h: the model
// run, run --distributed, train and split --preview share) and placed by PlanBackends.
// Joined seams: neighbouring submodels that go to the same backend (by name) may run as one
// graph (ir::joinGraphs), so fusion sees across the seam between them; the values later
// submodels or the outputs read are still produced. A cut for two different backends keeps every
// seam between them.
// Complexity: per run, the modules' runs plus O(boundary values) to route tensors.
#pragma once

#include <functional>
#include <map>
#include <memory>

#include <chrono>
#include <vector>

#include "runtime/model/backend.h"
#include "runtime/model/loaded_plan.h"
#include "runtime/model/plan_backends.h"

namespace cleave::runtime {

struct CutModelOptions {
  // A distributed run's place: the plan is placed over `worldSize` ranks (LoadedPlan) and, with
  // `rank` >= 0, only that rank's submodules are lowered (runStep refuses the others).
  int rank = -1, worldSize = 1;
  // Run neighbouring submodules on the same backend as one joined graph. runStep then refuses a
  // joined submodule; so a distributed rank (`rank` >= 0) never joins.
  bool joinSeams = false;
  // The optimizations of the backends made for a partition plan's devices (device_backends).
  Optimizations optimizations;
};

class CutModel {
public:
  // Accelerator submodules (split plans) and every partition (partition plans) go to `acc`;
  // the rest to `cpu`; but a partition whose device names a backend (plan.json's
  // "device_backends": logical id -> backend, from the devices file) runs on that backend, made
  // once per name (`acc` or `cpu` when it is theirs). Fails: what LoadedPlan::load fails with,
  // InvalidArgument (an unknown backend name, naming the device), what lowering fails with
  // (naming the submodule).
  static Expected<CutModel> load(const std::string& dir, const Backend& acc, const Backend& cpu,
                                 const CutModelOptions& options = {});

  Expected<TensorMap> run(const TensorMap& inputs, std::vector<SubmoduleTiming>* timings = nullptr,
                          RunStats* stats = nullptr);

  // The plan it runs: its submodules' placement and its values' routes.
  const LoadedPlan& plan() const { return *plan_; }
  std::size_t size() const { return steps_.size(); }
  // What run() runs: one module per submodule, fewer when seams are joined.
  std::size_t modules() const { return units_.size(); }
  const std::string& stepName(std::size_t i) const { return plan_->submodules()[i].name; }
  const std::vector<std::string>& stepInputs(std::size_t i) const { return plan_->submodules()[i].inputs; }
  // Runs submodule i on `values` (which must hold its inputs; other entries are ignored); returns
  // its outputs, possibly in oneDNN's blocked layout (toDense before leaving the process).
  // Fails: InvalidArgument when submodule i was not lowered on its own (not this rank's, or
  // joined with a neighbour).
  Expected<TensorMap> runStep(std::size_t i, const TensorMap& values, RunStats* stats = nullptr,
                              double* seconds = nullptr);
  const std::vector<std::string>& graphInputs() const { return plan_->graphInputs(); }
  const std::vector<std::string>& graphOutputs() const { return plan_->outputs(); }
  // The submodels' graphs, in plan order (their inputs' types give random inputs a shape).
  std::vector<const ir::Graph*> graphs() const;
  // Random graph inputs (tensors.h: the same seed gives the whole model the same tensors).
  Expected<TensorMap> randomInputs(std::uint64_t seed, const std::map<std::string, std::int64_t>& dims) const;

private:
  static constexpr std::size_t kNotLowered = SIZE_MAX;
  struct Step { // one submodule of the plan (plan_->submodules(), same index)
    std::string backend;
    std::size_t unit = kNotLowered; // the unit that runs it
  };
  struct Unit { // one lowered module: a submodule, or neighbours joined
    std::string name, backend;
    std::unique_ptr<LoweredModule> module;
    std::vector<std::string> inputs, outputs;
    std::size_t steps = 1;               // submodules it runs
    std::vector<std::string> dropAfter; // values no later unit or output reads
  };
  // The neighbouring steps [first, last] lowered as one unit (joined when more than one).
  Status lowerUnit(std::size_t first, std::size_t last, const Backend& backend);
  void planDrops();
  Expected<TensorMap> runUnit(std::size_t u, const TensorMap& values, RunStats* stats, double* seconds);
  Expected<TensorMap> feedsOf(const Unit& unit, const TensorMap& values, RunStats* stats) const;

  std::shared_ptr<const LoadedPlan> plan_;
  std::vector<Step> steps_;
  std::vector<Unit> units_;
  std::unique_ptr<PlanBackends> backends_; // outlives the modules lowered on them
};


} // namespace cleave::runtime
