#include "runtime/cut_model.h"

#include <filesystem>
#include <set>

#include "base/file_io.h"
#include "io/onnx.h"
#include "plan/plan_file.h"

namespace cleave::runtime {

Expected<CutModel> CutModel::load(const std::string& dir, const Backend& acc, const Backend& cpu,
                                  const std::function<bool(std::size_t)>& lowers) {
  CLEAVE_TRY(plan::PlanFile planFile, plan::readPlan(dir));
  CutModel model;
  std::set<std::string> graphInputs;
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
    step.graph = std::make_shared<const ir::Graph>(std::move(graph));
    const Backend& backend = plan::runsOnAccelerator(sub.role) ? acc : cpu;
    step.backend = backend.name();
    if (lowers && !lowers(model.steps_.size())) {
      model.steps_.push_back(std::move(step));
      continue;
    }
    Expected<std::unique_ptr<LoweredModule>> lowered = backend.lower(step.graph);
    if (!lowered)
      return std::move(lowered.error().withContext("submodule '" + step.name + "'"));
    step.module = std::move(*lowered);
    model.steps_.push_back(std::move(step));
  }
  for (const plan::PlanFileInput& output : planFile.outputs)
    model.outputs_.push_back(output.value);
  return model;
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
  // How many later steps read each value, to drop it after its last reader.
  std::map<std::string, std::size_t> readers;
  for (const Step& step : steps_)
    for (const std::string& name : step.inputs)
      ++readers[name];
  std::set<std::string> keep(outputs_.begin(), outputs_.end());
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    Step& step = steps_[i];
    double seconds = 0.0;
    CLEAVE_TRY(TensorMap results, runStep(i, values, stats, &seconds));
    if (timings)
      timings->push_back({step.name, step.backend, seconds});
    for (auto& [name, tensor] : results)
      values[name] = std::move(tensor);
    for (const std::string& name : step.inputs)
      if (--readers[name] == 0 && !keep.count(name))
        values.erase(name);
  }
  TensorMap outputs;
  for (const std::string& name : outputs_)
    outputs[name] = toDense(values.at(name));
  return outputs;
}

Expected<TensorMap> CutModel::runStep(std::size_t i, const TensorMap& values, RunStats* stats, double* seconds) {
  Step& step = steps_[i];
  if (!step.module)
    return Error(ErrorCode::InvalidArgument) << "submodule '" << step.name << "' was not lowered in this process";
  TensorMap feeds;
  for (const std::string& name : step.inputs) {
    auto found = values.find(name);
    if (found == values.end())
      return Error(ErrorCode::InvalidArgument) << "submodule '" << step.name << "': no value for '" << name << "'";
    const at::Tensor& value = found->second;
    // Values in oneDNN's blocked layout pass as they are between CPU submodels.
    feeds[name] = value.is_mkldnn() && step.module->device().is_cpu() ? value : toDense(value).to(step.module->device());
  }
  auto start = std::chrono::steady_clock::now();
  Expected<TensorMap> results = step.module->run(feeds, stats, nullptr, OutputLayout::AsComputed);
  if (seconds)
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!results)
    return std::move(results.error().withContext("submodule '" + step.name + "'"));
  TensorMap outputs;
  for (const std::string& name : step.outputs)
    outputs[name] = results->at(name);
  return outputs;
}

} // namespace cleave::runtime
