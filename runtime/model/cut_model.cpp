#include "runtime/model/cut_model.h"

#include <chrono>
#include <map>
#include <set>

#include "ir/extract.h"

namespace cleave::runtime {

namespace {
// Whether a later submodule than `last` or the plan's outputs read the value.
bool readAfter(const ValueRoute& route, std::size_t last) {
  return route.planOutput || (!route.readers.empty() && route.readers.back() > last);
}
} // namespace

Expected<CutModel> CutModel::load(const std::string& dir, const Backend& acc, const Backend& cpu,
                                  const CutModelOptions& options) {
  CLEAVE_TRY(LoadedPlan loaded, LoadedPlan::load(dir, options.worldSize));
  CutModel model;
  model.plan_ = std::make_shared<const LoadedPlan>(std::move(loaded));
  model.backends_ = std::make_unique<PlanBackends>(acc, cpu, options.optimizations);
  std::vector<const Backend*> backends;
  for (const PlacedSubmodule& sub : model.plan_->submodules()) {
    CLEAVE_TRY(const Backend* backend, model.backends_->of(sub));
    backends.push_back(backend);
    model.steps_.push_back(Step{backend->name()});
  }
  // Units: runs of neighbours on the same backend when joining, else one per (lowered) step.
  const bool join = options.joinSeams && options.rank < 0;
  for (std::size_t first = 0; first < model.steps_.size();) {
    std::size_t last = first;
    while (join && last + 1 < model.steps_.size() && model.steps_[last + 1].backend == model.steps_[first].backend)
      ++last;
    if (options.rank < 0 || model.plan_->submodules()[first].rank == options.rank)
      CLEAVE_CHECK(model.lowerUnit(first, last, *backends[first]));
    first = last + 1;
  }
  model.planDrops();
  return model;
}

Status CutModel::lowerUnit(std::size_t first, std::size_t last, const Backend& backend) {
  const std::vector<PlacedSubmodule>& subs = plan_->submodules();
  Unit unit;
  unit.backend = backend.name();
  unit.steps = last - first + 1;
  std::shared_ptr<const ir::Graph> graph = subs[first].graph;
  if (first == last) {
    unit.name = subs[first].name;
    unit.inputs = subs[first].inputs;
    unit.outputs = subs[first].outputs;
  } else {
    unit.name = subs[first].name + ".." + subs[last].name;
    // Inputs: what the run reads from before it; outputs: what it makes that a later step or the
    // model's outputs read.
    std::set<std::string> made, inputs;
    std::vector<const ir::Graph*> parts;
    for (std::size_t i = first; i <= last; ++i) {
      for (const std::string& name : subs[i].inputs)
        if (!made.count(name) && inputs.insert(name).second)
          unit.inputs.push_back(name);
      for (const std::string& name : subs[i].outputs)
        if (made.insert(name).second && readAfter(plan_->routeOf(name), last))
          unit.outputs.push_back(name);
      parts.push_back(subs[i].graph.get());
    }
    Expected<ir::Graph> joined = ir::joinGraphs({unit.name, parts, unit.outputs, plan_->dir()});
    if (!joined)
      return std::move(joined.error().withContext("joining submodules '" + unit.name + "' (--no-join runs them apart)"));
    graph = std::make_shared<const ir::Graph>(std::move(*joined));
  }
  Expected<std::unique_ptr<LoweredModule>> lowered = backend.lower(graph);
  if (!lowered)
    return std::move(lowered.error().withContext("submodule '" + unit.name + "'"));
  unit.module = std::move(*lowered);
  for (std::size_t i = first; i <= last; ++i)
    steps_[i].unit = units_.size();
  units_.push_back(std::move(unit));
  return {};
}

// Each value is dropped after the last unit that reads it, unless it is a model output.
void CutModel::planDrops() {
  std::map<std::string, std::size_t> lastReader;
  for (std::size_t u = 0; u < units_.size(); ++u)
    for (const std::string& name : units_[u].inputs)
      lastReader[name] = u;
  for (const std::string& name : plan_->outputs())
    lastReader.erase(name);
  for (const auto& [name, u] : lastReader)
    units_[u].dropAfter.push_back(name);
}

std::vector<const ir::Graph*> CutModel::graphs() const {
  std::vector<const ir::Graph*> graphs;
  for (const PlacedSubmodule& sub : plan_->submodules())
    graphs.push_back(sub.graph.get());
  return graphs;
}

Expected<TensorMap> CutModel::randomInputs(std::uint64_t seed, const std::map<std::string, std::int64_t>& dims) const {
  TensorMap inputs;
  for (const std::string& name : graphInputs())
    for (const PlacedSubmodule& sub : plan_->submodules()) {
      const ir::Graph& graph = *sub.graph;
      ir::ValueId value = graph.findValue(name);
      if (value == ir::kNoValue || graph.kind(graph.producer(value)) != ir::NodeKind::Input)
        continue;
      CLEAVE_TRY(at::Tensor tensor, randomTensor(graph, value, seed, 10, dims));
      inputs[name] = std::move(tensor);
      break;
    }
  return inputs;
}

Expected<TensorMap> CutModel::run(const TensorMap& inputs, std::vector<SubmoduleTiming>* timings, RunStats* stats) {
  TensorMap values;
  for (const std::string& name : graphInputs()) {
    auto found = inputs.find(name);
    if (found == inputs.end())
      return Error(ErrorCode::InvalidArgument) << "no value for input '" << name << "'";
    values[name] = found->second;
  }
  for (std::size_t i = 0; i < steps_.size(); ++i)
    if (steps_[i].unit == kNotLowered)
      return Error(ErrorCode::InvalidArgument) << "submodule '" << stepName(i) << "' was not lowered in this process";
  for (std::size_t u = 0; u < units_.size(); ++u) {
    double seconds = 0.0;
    CLEAVE_TRY(TensorMap results, runUnit(u, values, stats, &seconds));
    if (timings)
      timings->push_back({units_[u].name, units_[u].backend, seconds});
    for (auto& [name, tensor] : results)
      values[name] = std::move(tensor);
    for (const std::string& name : units_[u].dropAfter)
      values.erase(name);
  }
  TensorMap outputs;
  for (const std::string& name : graphOutputs())
    outputs[name] = denseFromPrivateLayout(values.at(name));
  return outputs;
}

Expected<TensorMap> CutModel::runStep(std::size_t i, const TensorMap& values, RunStats* stats, double* seconds) {
  const Step& step = steps_[i];
  if (step.unit == kNotLowered)
    return Error(ErrorCode::InvalidArgument) << "submodule '" << stepName(i) << "' was not lowered in this process";
  if (units_[step.unit].steps != 1)
    return Error(ErrorCode::InvalidArgument) << "submodule '" << stepName(i) << "' runs joined as '"
                                             << units_[step.unit].name << "'";
  return runUnit(step.unit, values, stats, seconds);
}

// The unit's inputs on its device; with profileOps, the moves across devices timed into `stats`.
Expected<TensorMap> CutModel::feedsOf(const Unit& unit, const TensorMap& values, RunStats* stats) const {
  const at::Device target = unit.module->device();
  const bool timed = stats && stats->profileOps;
  std::chrono::steady_clock::duration spent{};
  TensorMap feeds;
  for (const std::string& name : unit.inputs) {
    auto found = values.find(name);
    if (found == values.end())
      return Error(ErrorCode::InvalidArgument) << "submodule '" << unit.name << "': no value for '" << name << "'";
    const at::Tensor& value = found->second;
    // Values in a private layout (the CPU wing's blocked one) pass as they are between CPU submodels.
    if (inPrivateLayout(value) && target.is_cpu()) {
      feeds[name] = value;
      continue;
    }
    const bool crosses = timed && value.device() != target;
    if (crosses)
      synchronizeDevice(value.device());
    auto start = std::chrono::steady_clock::now();
    feeds[name] = denseFromPrivateLayout(value).to(target);
    if (!crosses)
      continue;
    synchronizeDevice(target);
    spent += std::chrono::steady_clock::now() - start;
    ++stats->seamCopies;
    stats->seamCopyBytes += static_cast<std::int64_t>(feeds[name].nbytes());
  }
  if (timed)
    stats->seamCopySeconds += std::chrono::duration<double>(spent).count();
  return feeds;
}

Expected<TensorMap> CutModel::runUnit(std::size_t u, const TensorMap& values, RunStats* stats, double* seconds) {
  Unit& unit = units_[u];
  CLEAVE_TRY(TensorMap feeds, feedsOf(unit, values, stats));
  auto start = std::chrono::steady_clock::now();
  Expected<TensorMap> results = unit.module->run(feeds, stats, nullptr, OutputLayout::AsComputed);
  if (seconds) // a device's kernels may still be running: its time is theirs too
    synchronizeDevice(unit.module->device());
  if (seconds)
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!results)
    return std::move(results.error().withContext("submodule '" + unit.name + "'"));
  TensorMap outputs;
  for (const std::string& name : unit.outputs)
    outputs[name] = results->at(name);
  return outputs;
}

} // namespace cleave::runtime
