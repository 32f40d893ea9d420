// runtime/cut_model.h - a cut model (a plan.json directory from split or partition) as one
// runnable thing: its submodels lowered onto backends, run in plan order, each fed from the
// graph inputs and earlier submodels' outputs (moved to the submodel's device), values dropped
// once no later submodel reads them.
// Complexity: per run, the submodels' runs plus O(boundary values) to route tensors.
#pragma once

#include <functional>

#include <chrono>
#include <vector>

#include "runtime/backend.h"

namespace cleave::runtime {

struct SubmoduleTiming {
  std::string name;
  std::string backend;
  double seconds = 0.0;
};

class CutModel {
public:
  // Accelerator submodules (split plans) and every partition (partition plans) go to `acc`;
  // the rest to `cpu`. Fails: NotFound/ParseError (plan.json), InvalidGraph (a submodule reads a
  // value nothing earlier makes), what lowering fails with (naming the submodule).
  // `lowers` (optional) picks the submodules to lower by plan index: a distributed rank lowers
  // only its own (runStep refuses the others).
  static Expected<CutModel> load(const std::string& dir, const Backend& acc, const Backend& cpu,
                                 const std::function<bool(std::size_t)>& lowers = {});

  Expected<TensorMap> run(const TensorMap& inputs, std::vector<SubmoduleTiming>* timings = nullptr,
                          RunStats* stats = nullptr);

  std::size_t size() const { return steps_.size(); }
  const std::string& stepName(std::size_t i) const { return steps_[i].name; }
  const std::vector<std::string>& stepInputs(std::size_t i) const { return steps_[i].inputs; }
  const std::vector<std::string>& stepOutputs(std::size_t i) const { return steps_[i].outputs; }
  // Runs submodule i on `values` (which must hold its inputs; other entries are ignored); returns
  // its outputs, possibly in oneDNN's blocked layout (toDense before leaving the process).
  Expected<TensorMap> runStep(std::size_t i, const TensorMap& values, RunStats* stats = nullptr,
                              double* seconds = nullptr);
  const std::vector<std::string>& graphInputs() const { return graphInputs_; }
  const std::vector<std::string>& graphOutputs() const { return outputs_; }
  // The submodels' graphs, in plan order (their inputs' types give random inputs a shape).
  std::vector<const ir::Graph*> graphs() const;
  // Random graph inputs (tensors.h: the same seed gives the whole model the same tensors).
  Expected<TensorMap> randomInputs(std::uint64_t seed, const std::map<std::string, std::int64_t>& dims) const;

private:
  struct Step {
    std::string name, backend;
    std::shared_ptr<const ir::Graph> graph;
    std::unique_ptr<LoweredModule> module;
    std::vector<std::string> inputs, outputs;
  };
  std::vector<Step> steps_;
  std::vector<std::string> graphInputs_, outputs_;
};


} // namespace cleave::runtime
