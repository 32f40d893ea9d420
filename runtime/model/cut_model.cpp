#include "runtime/model/cut_model.h"

#include <filesystem>
#include <map>
#include <set>

#include "base/file_io.h"
#include "io/onnx.h"
#include "ir/extract.h"
#include "plan/plan_file.h"

namespace cleave::runtime {

// Where submodule `sub` runs: its device's backend where the plan names one (the first of its
// devices is the one it runs on; the rest hold replicas), else `acc` or `cpu` by its role.
Expected<const Backend*> CutModel::backendOf(const plan::PlanFileSubmodule& sub, const Backend& acc,
                                             const Backend& cpu,
                                             const std::map<std::int64_t, std::string>& deviceBackends,
                                             const Optimizations& optimizations) {
  auto named = sub.devices.empty() ? deviceBackends.end() : deviceBackends.find(sub.devices[0]);
  if (named == deviceBackends.end())
    return plan::runsOnAccelerator(sub.role) ? &acc : &cpu;
  const std::string& name = named->second;
  if (name == acc.name())
    return &acc;
  if (name == cpu.name())
    return &cpu;
  auto made = deviceBackends_.find(name);
  if (made == deviceBackends_.end()) {
    Expected<std::unique_ptr<Backend>> backend = makeBackend(name, optimizations);
    if (!backend)
      return Error(backend.error().code()) << "submodule '" << sub.name << "' runs on device " << sub.devices[0]
                                           << ", whose backend fails: " << backend.error().message();
    made = deviceBackends_.emplace(name, std::move(*backend)).first;
  }
  return made->second.get();
}

Expected<CutModel> CutModel::load(const std::string& dir, const Backend& acc, const Backend& cpu,
                                  const CutModelOptions& options) {
  CLEAVE_TRY(plan::PlanFile planFile, plan::readPlan(dir));
  CLEAVE_TRY(auto deviceBackends, plan::deviceBackends(planFile, dir));
  CutModel model;
  std::set<std::string> graphInputs;
  std::vector<const Backend*> backends;
  for (const plan::PlanFileSubmodule& sub : planFile.submodules) {
    if (sub.file.empty())
      return Error(ErrorCode::ParseError) << dir << ": submodule '" << sub.name
                                          << "' has no model file (FX plans are applied with tools/cleave_fx.py)";
    Step step;
    step.name = sub.name;
    for (const plan::PlanFileInput& input : sub.inputs) {
      if (input.from == "input" && graphInputs.insert(input.value).second)
        model.graphInputs_.push_back(input.value);
      step.inputs.push_back(input.value);
    }
    step.outputs = sub.outputs;
    // readPlan has checked that the file lies inside the plan's folder.
    std::string file = (std::filesystem::path(dir) / sub.file).string();
    CLEAVE_TRY(ir::Graph graph, io::readOnnx(file));
    // Reading touched the file's pages; its parameters are read again when it is lowered (or by
    // the joined graph, from the file), so they need not stay resident meanwhile: a BERT cut 49
    // ways holds its layers' weights in every submodule file (85 MiB).
    if (graph.modelFile())
      graph.modelFile()->releaseResidentPages();
    step.graph = std::make_shared<const ir::Graph>(std::move(graph));
    CLEAVE_TRY(const Backend* backend, model.backendOf(sub, acc, cpu, deviceBackends, options.optimizations));
    backends.push_back(backend);
    step.backend = backends.back()->name();
    model.steps_.push_back(std::move(step));
  }
  for (const plan::PlanFileInput& output : planFile.outputs)
    model.outputs_.push_back(output.value);
  // Units: runs of neighbours on the same backend when joining, else one per (lowered) step.
  const bool join = options.joinSeams && !options.lowers;
  for (std::size_t first = 0; first < model.steps_.size();) {
    std::size_t last = first;
    while (join && last + 1 < model.steps_.size() && model.steps_[last + 1].backend == model.steps_[first].backend)
      ++last;
    if (!options.lowers || options.lowers(first))
      CLEAVE_CHECK(model.lowerUnit(dir, first, last, *backends[first]));
    first = last + 1;
  }
  model.planDrops();
  return model;
}

Status CutModel::lowerUnit(const std::string& dir, std::size_t first, std::size_t last, const Backend& backend) {
  Unit unit;
  unit.backend = backend.name();
  unit.steps = last - first + 1;
  std::shared_ptr<const ir::Graph> graph = steps_[first].graph;
  if (first == last) {
    unit.name = steps_[first].name;
    unit.inputs = steps_[first].inputs;
    unit.outputs = steps_[first].outputs;
  } else {
    unit.name = steps_[first].name + ".." + steps_[last].name;
    // Inputs: what the run reads from before it; outputs: what it makes that a later step or the
    // model's outputs read.
    std::set<std::string> made, inputs, readLater(outputs_.begin(), outputs_.end());
    for (std::size_t i = last + 1; i < steps_.size(); ++i)
      readLater.insert(steps_[i].inputs.begin(), steps_[i].inputs.end());
    std::vector<const ir::Graph*> parts;
    for (std::size_t i = first; i <= last; ++i) {
      for (const std::string& name : steps_[i].inputs)
        if (!made.count(name) && inputs.insert(name).second)
          unit.inputs.push_back(name);
      for (const std::string& name : steps_[i].outputs)
        if (made.insert(name).second && readLater.count(name))
          unit.outputs.push_back(name);
      parts.push_back(steps_[i].graph.get());
    }
    Expected<ir::Graph> joined = ir::joinGraphs({unit.name, parts, unit.outputs, dir});
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
  for (const std::string& name : outputs_)
    lastReader.erase(name);
  for (const auto& [name, u] : lastReader)
    units_[u].dropAfter.push_back(name);
}

std::vector<const ir::Graph*> CutModel::graphs() const {
  std::vector<const ir::Graph*> graphs;
  for (const Step& step : steps_)
    graphs.push_back(step.graph.get());
  return graphs;
}

Expected<TensorMap> CutModel::randomInputs(std::uint64_t seed, const std::map<std::string, std::int64_t>& dims) const {
  TensorMap inputs;
  for (const std::string& name : graphInputs_)
    for (const Step& step : steps_) {
      ir::ValueId value = step.graph->findValue(name);
      if (value == ir::kNoValue || step.graph->kind(step.graph->producer(value)) != ir::NodeKind::Input)
        continue;
      CLEAVE_TRY(at::Tensor tensor, randomTensor(*step.graph, value, seed, 10, dims));
      inputs[name] = std::move(tensor);
      break;
    }
  return inputs;
}

Expected<TensorMap> CutModel::run(const TensorMap& inputs, std::vector<SubmoduleTiming>* timings, RunStats* stats) {
  TensorMap values;
  for (const std::string& name : graphInputs_) {
    auto found = inputs.find(name);
    if (found == inputs.end())
      return Error(ErrorCode::InvalidArgument) << "no value for input '" << name << "'";
    values[name] = found->second;
  }
  for (const Step& step : steps_)
    if (step.unit == kNotLowered)
      return Error(ErrorCode::InvalidArgument) << "submodule '" << step.name << "' was not lowered in this process";
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
  for (const std::string& name : outputs_)
    outputs[name] = toDense(values.at(name));
  return outputs;
}

Expected<TensorMap> CutModel::runStep(std::size_t i, const TensorMap& values, RunStats* stats, double* seconds) {
  const Step& step = steps_[i];
  if (step.unit == kNotLowered)
    return Error(ErrorCode::InvalidArgument) << "submodule '" << step.name << "' was not lowered in this process";
  if (units_[step.unit].steps != 1)
    return Error(ErrorCode::InvalidArgument) << "submodule '" << step.name << "' runs joined as '"
                                             << units_[step.unit].name << "'";
  return runUnit(step.unit, values, stats, seconds);
}

Expected<TensorMap> CutModel::runUnit(std::size_t u, const TensorMap& values, RunStats* stats, double* seconds) {
  Unit& unit = units_[u];
  TensorMap feeds;
  for (const std::string& name : unit.inputs) {
    auto found = values.find(name);
    if (found == values.end())
      return Error(ErrorCode::InvalidArgument) << "submodule '" << unit.name << "': no value for '" << name << "'";
    const at::Tensor& value = found->second;
    // Values in oneDNN's blocked layout pass as they are between CPU submodels.
    feeds[name] = isBlocked(value) && unit.module->device().is_cpu() ? value : toDense(value).to(unit.module->device());
  }
  auto start = std::chrono::steady_clock::now();
  Expected<TensorMap> results = unit.module->run(feeds, stats, nullptr, OutputLayout::AsComputed);
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
