// runtime/model/cut_model.h - a cut model (a plan.json directory from split or partition) as one
// runnable thing: its submodels lowered onto backends, run in plan order, each fed from the
// graph inputs and earlier submodels' outputs (moved to the submodel's device), values dropped
// once no later submodel reads them.
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

namespace cleave::plan {
struct PlanFileSubmodule;
} // namespace cleave::plan

namespace cleave::runtime {

struct SubmoduleTiming {
  std::string name;
  std::string backend;
  double seconds = 0.0;
};

struct CutModelOptions {
  // Picks the submodules to lower by plan index: a distributed rank lowers only its own (runStep
  // refuses the others). Empty: every one.
  std::function<bool(std::size_t)> lowers;
  // Run neighbouring submodules on the same backend as one joined graph. runStep then refuses a
  // joined submodule; so a distributed rank (`lowers`) never joins.
  bool joinSeams = false;
  // The optimizations of the backends made for a partition plan's devices (device_backends).
  Optimizations optimizations;
};

class CutModel {
public:
  // Accelerator submodules (split plans) and every partition (partition plans) go to `acc`;
  // the rest to `cpu`; but a partition whose device names a backend (plan.json's
  // "device_backends": logical id -> backend, from the devices file) runs on that backend, made
  // once per name (`acc` or `cpu` when it is theirs). Fails also: InvalidArgument (an unknown
  // backend name, naming the device). Fails: NotFound/ParseError (plan.json), InvalidGraph (a submodule reads a
  // value nothing earlier makes), what lowering fails with (naming the submodule).
  static Expected<CutModel> load(const std::string& dir, const Backend& acc, const Backend& cpu,
                                 const CutModelOptions& options = {});

  Expected<TensorMap> run(const TensorMap& inputs, std::vector<SubmoduleTiming>* timings = nullptr,
                          RunStats* stats = nullptr);

  std::size_t size() const { return steps_.size(); }
  // What run() runs: one module per submodule, fewer when seams are joined.
  std::size_t modules() const { return units_.size(); }
  const std::string& stepName(std::size_t i) const { return steps_[i].name; }
  const std::vector<std::string>& stepInputs(std::size_t i) const { return steps_[i].inputs; }
  const std::vector<std::string>& stepOutputs(std::size_t i) const { return steps_[i].outputs; }
  // Runs submodule i on `values` (which must hold its inputs; other entries are ignored); returns
  // its outputs, possibly in oneDNN's blocked layout (toDense before leaving the process).
  // Fails: InvalidArgument when submodule i was not lowered on its own (not this rank's, or
  // joined with a neighbour).
  Expected<TensorMap> runStep(std::size_t i, const TensorMap& values, RunStats* stats = nullptr,
                              double* seconds = nullptr);
  const std::vector<std::string>& graphInputs() const { return graphInputs_; }
  const std::vector<std::string>& graphOutputs() const { return outputs_; }
  // The submodels' graphs, in plan order (their inputs' types give random inputs a shape).
  std::vector<const ir::Graph*> graphs() const;
  // Random graph inputs (tensors.h: the same seed gives the whole model the same tensors).
  Expected<TensorMap> randomInputs(std::uint64_t seed, const std::map<std::string, std::int64_t>& dims) const;

private:
  static constexpr std::size_t kNotLowered = SIZE_MAX;
  struct Step { // one submodule of the plan
    std::string name, backend;
    std::shared_ptr<const ir::Graph> graph;
    std::vector<std::string> inputs, outputs;
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
  Expected<const Backend*> backendOf(const plan::PlanFileSubmodule& sub, const Backend& acc, const Backend& cpu,
                                     const std::map<std::int64_t, std::string>& deviceBackends,
                                     const Optimizations& optimizations);
  Status lowerUnit(const std::string& dir, std::size_t first, std::size_t last, const Backend& backend);
  void planDrops();
  Expected<TensorMap> runUnit(std::size_t u, const TensorMap& values, RunStats* stats, double* seconds);

  std::vector<Step> steps_;
  std::vector<Unit> units_;
  std::map<std::string, std::unique_ptr<Backend>> deviceBackends_; // made for the plan's devices
  std::vector<std::string> graphInputs_, outputs_;
};


} // namespace cleave::runtime
