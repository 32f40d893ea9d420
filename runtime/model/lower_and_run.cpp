#include "runtime/model/lower_and_run.h"

#include "ir/extract.h"
#include "runtime/model/loaded_plan.h"

namespace cleave::runtime {
using ir::NodeId;

Expected<ReferenceRun> ReferenceRun::run(std::shared_ptr<const ir::Graph> graph, const Backend& backend,
                                         const TensorMap& inputs) {
  ReferenceRun reference;
  reference.graph_ = graph;
  reference.values_.resize(graph->numValues());
  CLEAVE_TRY(std::unique_ptr<LoweredModule> module, backend.lower(graph));
  // Kept on the CPU; a low-precision backend's floats in float32, the dtype trials compare in.
  Executor::Observer keep = [&](ir::ValueId value, const at::Tensor& tensor) {
    at::Tensor cpu = tensor.to(at::kCPU);
    if (cpu.scalar_type() == at::kBFloat16 || cpu.scalar_type() == at::kHalf)
      cpu = cpu.to(at::kFloat);
    reference.values_[index(value)] = cpu;
  };
  CLEAVE_TRY(TensorMap outputs, module->run(inputs, nullptr, &keep));
  (void)outputs;
  return reference;
}

TensorMap ReferenceRun::valuesByName(const std::vector<ir::ValueId>& values) const {
  TensorMap byName;
  for (ir::ValueId value : values)
    byName[std::string(graph_->valueName(value))] = values_[index(value)];
  return byName;
}

Expected<std::pair<ir::Graph, TensorMap>> extractNodes(const ReferenceRun& reference, const std::vector<NodeId>& nodes) {
  const ir::Graph& graph = reference.graph();
  ir::NodeSetBoundary boundary = ir::boundaryOf(graph, nodes);
  CLEAVE_TRY(ir::Graph part, ir::extractSubgraph(graph, {"trial", nodes, boundary.inputs, boundary.outputs}));
  return std::make_pair(std::move(part), reference.valuesByName(boundary.inputs));
}

TrialResult trySubgraph(const ReferenceRun& reference, std::shared_ptr<const ir::Graph> part, const Backend& backend,
                        const AllClose& tolerance) {
  TrialResult result;
  const ir::Graph& whole = reference.graph();
  TensorMap feeds;
  for (const std::string& name : ir::graphInputNames(*part))
    feeds[name] = reference.value(whole.findValue(name));
  Expected<std::unique_ptr<LoweredModule>> module = backend.lower(part);
  if (!module)
    return {TrialOutcome::LoweringFailed, module.error().message()};
  Expected<TensorMap> outputs = (*module)->run(feeds);
  if (!outputs)
    return {TrialOutcome::RunFailed, outputs.error().message()};
  for (ir::ValueId value : part->graphOutputs()) {
    std::string name(part->valueName(value));
    at::Tensor want = reference.value(whole.findValue(name));
    at::Tensor got = outputs->at(name).to(at::kCPU);
    if (want.sizes() != got.sizes() || want.scalar_type() != got.scalar_type()) {
      return {TrialOutcome::Mismatch, "output '" + name + "' has another shape or dtype"};
    }
    if (want.numel() == 0 || !(at::isFloatingType(want.scalar_type()) || at::isIntegralType(want.scalar_type(), true)))
      continue;
    Comparison comparison = compareTensors(got, want, tolerance);
    result.maxAbs = std::max(result.maxAbs, comparison.maxAbs);
    result.maxRel = std::max(result.maxRel, comparison.maxElementRel);
    result.maxScaled = std::max(result.maxScaled, comparison.scaledError());
    if (!comparison.equal && result.passed()) {
      result.outcome = TrialOutcome::Mismatch;
      result.message = "output '" + name + "' differs: " + comparison.message;
    }
  }
  return result;
}

TrialResult tryNodes(const ReferenceRun& reference, const std::vector<NodeId>& nodes, const Backend& backend,
                     const AllClose& tolerance) {
  Expected<std::pair<ir::Graph, TensorMap>> part = extractNodes(reference, nodes);
  if (!part)
    return {TrialOutcome::LoweringFailed, part.error().message()};
  return trySubgraph(reference, std::make_shared<const ir::Graph>(std::move(part->first)), backend, tolerance);
}

Expected<std::vector<SubmoduleTrial>> tryAccSubmodules(const ReferenceRun& reference, const plan::CutPlan& cut,
                                                       const Backend& backend, const AllClose& tolerance) {
  CLEAVE_TRY(LoadedPlan loaded, LoadedPlan::fromCut(reference.graph(), cut));
  std::vector<SubmoduleTrial> trials;
  for (std::size_t s = 0; s < loaded.size(); ++s) {
    const PlacedSubmodule& submodule = loaded.submodules()[s];
    if (submodule.role != plan::SubmoduleRole::Accelerator)
      continue;
    SubmoduleTrial trial;
    trial.name = submodule.name;
    trial.result = trySubgraph(reference, submodule.graph, backend, tolerance);
    if (!trial.result.passed())
      for (NodeId node : cut.submodules[s].nodes) {
        TrialResult alone = tryNodes(reference, {node}, backend, tolerance);
        if (!alone.passed()) {
          trial.culprit = node;
          trial.culpritResult = alone;
          break;
        }
      }
    trials.push_back(std::move(trial));
  }
  return trials;
}

} // namespace cleave::runtime
