// runtime/model/lower_and_run.h - trying parts of a model on a backend, against what the whole model
// computes on a reference backend (the seeds' split_preview lower-and-run,
// generate_inputs_for_submodules and net_min_base's minimizer).
//
// ReferenceRun runs the whole model once and keeps every value (inputs and op outputs).
// A trial takes any set of op nodes, extracts it as a standalone graph (its inputs: the values it
// reads from outside; its outputs: the values it makes that others read, or graph outputs), lowers
// it on the backend, feeds it the reference values and compares its outputs with theirs by
// runtime/model/compare.h's rule (kCutTolerance by default: scaled by each output's largest magnitude).
// Complexity: a reference run keeps every value (memory: the sum of all activations); a trial is
// O(V + E) to extract plus the subgraph's run.
#pragma once

#include "plan/plan.h"
#include "runtime/model/backend.h"
#include "runtime/model/compare.h"
#include "runtime/model/trial_result.h"

namespace cleave::runtime {

class ReferenceRun {
public:
  // Fails like Executor::create and run.
  static Expected<ReferenceRun> run(std::shared_ptr<const ir::Graph> graph, const Backend& backend,
                                    const TensorMap& inputs);
  const ir::Graph& graph() const { return *graph_; }
  const at::Tensor& value(ir::ValueId value) const { return values_[index(value)]; }
  // The values a submodule reads, by name (the seed's generate_inputs_for_submodules).
  TensorMap valuesByName(const std::vector<ir::ValueId>& values) const;

private:
  std::shared_ptr<const ir::Graph> graph_;
  std::vector<at::Tensor> values_; // by ValueId, on the CPU
};

// Runs `part`, a standalone graph whose inputs and outputs are values of the reference's graph
// (by name), on `backend`, fed and checked with the reference's values.
TrialResult trySubgraph(const ReferenceRun& reference, std::shared_ptr<const ir::Graph> part, const Backend& backend,
                        const AllClose& tolerance);
// Runs the op nodes `nodes` (topological order) of the reference's graph on `backend`.
TrialResult tryNodes(const ReferenceRun& reference, const std::vector<ir::NodeId>& nodes, const Backend& backend,
                     const AllClose& tolerance);

// The standalone graph of `nodes` and the reference values for its inputs (a repro).
Expected<std::pair<ir::Graph, TensorMap>> extractNodes(const ReferenceRun& reference,
                                                       const std::vector<ir::NodeId>& nodes);

// split_preview's lower-and-run: every accelerator submodule of `cut` (a plan of the reference's
// graph, not yet written) tried on `backend`, as the submodel split would write (its graph from
// LoadedPlan::fromCut, the model `cleave run` loads from the directory); for a failing one, the
// first of its nodes that fails alone (the culprit), if any does. Fails: what fromCut fails with.
struct SubmoduleTrial {
  std::string name;
  TrialResult result;
  std::optional<ir::NodeId> culprit;
  TrialResult culpritResult;
};
Expected<std::vector<SubmoduleTrial>> tryAccSubmodules(const ReferenceRun& reference, const plan::CutPlan& cut,
                                                       const Backend& backend, const AllClose& tolerance);

} // namespace cleave::runtime
