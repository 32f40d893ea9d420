#include "runtime/cut_model.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>

#include "base/file_io.h"
#include "base/json.h"
#include "io/onnx.h"

namespace cleave::runtime {

bool isPlanDirectory(const std::string& path) {
  return std::filesystem::is_directory(path) && std::filesystem::exists(std::filesystem::path(path) / "plan.json");
}

Expected<CutModel> CutModel::load(const std::string& dir, const Backend& acc, const Backend& cpu) {
  std::string planPath = (std::filesystem::path(dir) / "plan.json").string();
  CLEAVE_TRY(std::string text, readFile(planPath));
  CLEAVE_TRY(nlohmann::json plan, parseJsonInput(text, planPath));
  return guardJson(planPath, [&]() { return fromPlan(plan, dir, planPath, acc, cpu); });
}

Expected<CutModel> CutModel::fromPlan(const nlohmann::json& plan, const std::string& dir, const std::string& planPath,
                                      const Backend& acc, const Backend& cpu) {
  if (!plan.is_object() || plan.value("schema", "") != "cleave.plan" ||
      !plan.contains("submodules") || !plan["submodules"].is_array())
    return Error(ErrorCode::ParseError) << planPath << ": not a cleave plan";
  bool partition = plan.value("kind", "") == "partition";
  CutModel model;
  std::set<std::string> available;
  for (const auto& sub : plan["submodules"]) {
    Step step;
    step.name = sub.value("name", "");
    if (!sub.contains("file"))
      return Error(ErrorCode::ParseError) << planPath << ": submodule '" << step.name
                                          << "' has no model file (FX plans are applied with tools/cleave_fx.py)";
    for (const auto& input : sub["inputs"]) {
      std::string value = input.value("value", "");
      if (input.value("from", "") == "input") {
        if (available.insert(value).second)
          model.graphInputs_.push_back(value);
      } else if (!available.count(value)) {
        return Error(ErrorCode::InvalidGraph) << planPath << ": submodule '" << step.name << "' reads '" << value
                                              << "', which no earlier submodule makes";
      }
      step.inputs.push_back(value);
    }
    for (const auto& output : sub["outputs"]) {
      step.outputs.push_back(output.get<std::string>());
      available.insert(step.outputs.back());
    }
    CLEAVE_TRY(std::string file, resolveInsideFolder(dir, sub["file"].get<std::string>(),
                                                     planPath + ": submodule '" + step.name + "' file"));
    CLEAVE_TRY(ir::Graph graph, io::readOnnx(file));
    step.graph = std::make_shared<const ir::Graph>(std::move(graph));
    const Backend& backend = partition || sub.value("is_acc", false) ? acc : cpu;
    step.backend = backend.name();
    Expected<std::unique_ptr<LoweredModule>> lowered = backend.lower(step.graph);
    if (!lowered)
      return std::move(lowered.error().withContext("submodule '" + step.name + "'"));
    step.module = std::move(*lowered);
    model.steps_.push_back(std::move(step));
  }
  for (const auto& output : plan.value("outputs", nlohmann::json::array()))
    model.outputs_.push_back(output.value("value", ""));
  return model;
}

std::vector<const ir::Graph*> CutModel::graphs() const {
  std::vector<const ir::Graph*> graphs;
  for (const Step& step : steps_)
    graphs.push_back(step.graph.get());
  return graphs;
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
  for (Step& step : steps_) {
    TensorMap feeds;
    for (const std::string& name : step.inputs) {
      const at::Tensor& value = values.at(name);
      // Values in oneDNN's blocked layout pass as they are between CPU submodels.
      feeds[name] = value.is_mkldnn() && step.module->device().is_cpu() ? value : toDense(value).to(step.module->device());
    }
    auto start = std::chrono::steady_clock::now();
    Expected<TensorMap> results = step.module->run(feeds, stats, nullptr, OutputLayout::AsComputed);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!results)
      return std::move(results.error().withContext("submodule '" + step.name + "'"));
    if (timings)
      timings->push_back({step.name, step.backend, seconds});
    for (const std::string& name : step.outputs)
      values[name] = results->at(name);
    for (const std::string& name : step.inputs)
      if (--readers[name] == 0 && !keep.count(name))
        values.erase(name);
  }
  TensorMap outputs;
  for (const std::string& name : outputs_)
    outputs[name] = toDense(values.at(name));
  return outputs;
}

} // namespace cleave::runtime
