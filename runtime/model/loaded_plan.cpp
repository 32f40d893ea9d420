#include "runtime/model/loaded_plan.h"

#include <filesystem>
#include <set>

#include "io/onnx.h"
#include "plan/materialize.h"
#include "pipeline/schedule.h"
#include "runtime/engine/kernel.h"

namespace cleave::runtime {

std::uint32_t LoadedPlan::idOf(const std::string& name) {
  auto [it, added] = ids_.emplace(name, static_cast<std::uint32_t>(routes_.size()));
  if (added)
    routes_.push_back(ValueRoute{name, kGraphInput, {}, false});
  return it->second;
}

void LoadedPlan::addRoutes(std::uint32_t index) {
  const PlacedSubmodule& sub = submodules_[index];
  for (const std::string& name : sub.inputs) {
    std::vector<std::uint32_t>& readers = routes_[idOf(name)].readers;
    if (readers.empty() || readers.back() != index)
      readers.push_back(index);
  }
  for (const std::string& name : sub.outputs)
    routes_[idOf(name)].producer = static_cast<std::int32_t>(index);
}

Expected<LoadedPlan> LoadedPlan::load(const std::string& dir, int worldSize, pipeline::Placement placement) {
  CLEAVE_TRY(plan::PlanFile file, plan::readPlan(dir));
  std::vector<std::shared_ptr<const ir::Graph>> graphs;
  for (const plan::PlanFileSubmodule& sub : file.submodules) {
    if (sub.file.empty())
      return Error(ErrorCode::ParseError) << dir << ": submodule '" << sub.name
                                          << "' has no model file (FX plans are applied with tools/cleave_fx.py)";
    // readPlan has checked that the file lies inside the plan's folder.
    CLEAVE_TRY(ir::Graph graph, io::readOnnx((std::filesystem::path(dir) / sub.file).string(),
                                             {.expandFunctions = opsWithoutKernels()}));
    // Reading touched the file's pages; its parameters are read again when it is lowered, so they
    // need not stay resident meanwhile: a BERT cut 49 ways holds its layers' weights in every
    // submodule file (85 MiB).
    if (graph.modelFile())
      graph.modelFile()->releaseResidentPages();
    graphs.push_back(std::make_shared<const ir::Graph>(std::move(graph)));
  }
  return assemble(dir, std::move(file), std::move(graphs), worldSize, placement);
}

Expected<LoadedPlan> LoadedPlan::fromCut(const ir::Graph& graph, const plan::CutPlan& cut, int worldSize) {
  const std::vector<plan::Boundary> boundaries = plan::computeBoundaries(graph, cut);
  plan::PlanFile file = plan::describePlan(graph, cut, boundaries, "", Json::object(), false);
  std::vector<std::shared_ptr<const ir::Graph>> graphs;
  for (std::uint32_t s = 0; s < cut.submodules.size(); ++s) {
    CLEAVE_TRY(ir::Graph sub, plan::extractSubmodule(graph, cut, boundaries, s));
    graphs.push_back(std::make_shared<const ir::Graph>(std::move(sub)));
  }
  return assemble("", std::move(file), std::move(graphs), worldSize, pipeline::Placement::Loop);
}

Expected<LoadedPlan> LoadedPlan::assemble(const std::string& dir, plan::PlanFile file,
                                          std::vector<std::shared_ptr<const ir::Graph>> graphs, int worldSize,
                                          pipeline::Placement placement) {
  LoadedPlan loaded;
  loaded.dir_ = dir;
  loaded.worldSize_ = worldSize;
  loaded.file_ = std::move(file);
  CLEAVE_TRY(auto deviceBackends, plan::deviceBackends(loaded.file_, dir));
  std::set<std::string> seenInputs;
  for (std::size_t s = 0; s < loaded.file_.submodules.size(); ++s) {
    const plan::PlanFileSubmodule& sub = loaded.file_.submodules[s];
    PlacedSubmodule placed;
    placed.name = sub.name;
    placed.file = sub.file;
    placed.role = sub.role;
    placed.graph = std::move(graphs[s]);
    placed.rank = pipeline::stageRank(s, worldSize, placement);
    if (!sub.devices.empty()) {
      placed.device = sub.devices[0]; // the rest hold replicas
      if (auto named = deviceBackends.find(placed.device); named != deviceBackends.end())
        placed.backend = named->second;
    }
    for (const plan::PlanFileInput& input : sub.inputs) {
      placed.inputs.push_back(input.value);
      if (input.from == "input" && seenInputs.insert(input.value).second)
        loaded.graphInputs_.push_back(input.value);
    }
    placed.outputs = sub.outputs;
    loaded.submodules_.push_back(std::move(placed));
    loaded.addRoutes(static_cast<std::uint32_t>(s));
  }
  for (const plan::PlanFileInput& output : loaded.file_.outputs) {
    loaded.outputs_.push_back(output.value);
    loaded.routes_[loaded.idOf(output.value)].planOutput = true;
  }
  return loaded;
}

Expected<std::uint32_t> LoadedPlan::valueId(const std::string& name) const {
  auto found = ids_.find(name);
  if (found == ids_.end())
    return Error(ErrorCode::NotFound) << dir_ << ": no submodule reads or makes a value '" << name << "'";
  return found->second;
}

const ValueRoute& LoadedPlan::routeOf(const std::string& name) const { return routes_[ids_.at(name)]; }

} // namespace cleave::runtime
