// runtime/model/loaded_plan.h - a cut model's plan as the runtime runs it: the one model of a
// loaded plan that `cleave run`, `run --distributed` and `train` share (CutModel, the distributed
// runner and the pipeline trainer all start from it).
//
// It carries, for every submodule, its graph, the values it reads and makes, and its placement:
// the rank that runs it (pipeline::stageRank, the rule schedules use) and the backend its device
// names (plan.json's "device_backends"), or none (the caller's choice by role). For every value
// that crosses a seam (graph inputs, values between submodules, plan outputs) it carries a route:
// a dense id (message tags and shape keys are built from it, so every rank numbers values alike),
// the submodule that makes it, the submodules that read it, and whether it is a plan output.
//
// Guarantees: ids follow the plan's order (each submodule's inputs, then its outputs, first seen
// first), so every process that loads the same plan gets the same ids; readers are in plan order
// without repeats; a value read before it is made cannot occur (readPlan's verifyPlanFile).
// Complexity: reading is linear in plan.json plus reading the submodels; lookups by id are O(1),
// by name O(log values).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/expected.h"
#include "ir/graph.h"
#include "pipeline/schedule.h"
#include "plan/plan_file.h"

namespace cleave::runtime {

inline constexpr std::int32_t kGraphInput = -1; // ValueRoute::producer of a graph input

struct PlacedSubmodule {
  std::string name;
  std::string file;  // the submodel, inside the plan's folder (empty for a plan in memory)
  plan::SubmoduleRole role = plan::SubmoduleRole::Cpu;
  std::shared_ptr<const ir::Graph> graph;
  std::vector<std::string> inputs, outputs; // value names, as plan.json lists them
  int rank = 0;         // the rank that runs it (pipeline::stageRank over the world size)
  std::string backend;  // its device's backend (plan.json's device_backends); empty: by role
  std::int64_t device = -1; // the logical device it runs on (its first), -1 when the plan has none
};

struct ValueRoute {
  std::string name;
  std::int32_t producer = kGraphInput; // the submodule that makes it
  std::vector<std::uint32_t> readers;  // the submodules that read it, in plan order
  bool planOutput = false;
};

class LoadedPlan {
public:
  // Reads DIR/plan.json and every submodel, placing submodule i on rank stageRank(i, worldSize,
  // placement) (the V placement: the zbv and dualpipev schedules').
  // Fails: what readPlan and deviceBackends fail with, ParseError (a submodule without a model
  // file: an FX plan), what reading a submodel fails with.
  static Expected<LoadedPlan> load(const std::string& dir, int worldSize = 1,
                                   pipeline::Placement placement = pipeline::Placement::Loop);
  // The same model of a plan still in memory (`split --preview`): each submodule's graph
  // extracted from `graph` as plan/materialize.h would write it; no directory (dir() is empty).
  // Fails: what extracting a submodule fails with.
  static Expected<LoadedPlan> fromCut(const ir::Graph& graph, const plan::CutPlan& cut, int worldSize = 1);

  const std::string& dir() const { return dir_; }
  // plan.json's content (for a plan in memory, what it would say); its node lists name each
  // submodule's nodes in the source graph.
  const plan::PlanFile& file() const { return file_; }
  const std::vector<PlacedSubmodule>& submodules() const { return submodules_; }
  std::size_t size() const { return submodules_.size(); }
  int worldSize() const { return worldSize_; }

  std::size_t values() const { return routes_.size(); }
  const ValueRoute& route(std::uint32_t id) const { return routes_[id]; }
  // Fails: NotFound when no submodule reads or makes `name`.
  Expected<std::uint32_t> valueId(const std::string& name) const;
  // The route of a value the plan names (a caller's name that is not one is a bug): O(log values).
  const ValueRoute& routeOf(const std::string& name) const;
  // The graph inputs (first-read order) and the plan outputs (plan.json's order).
  const std::vector<std::string>& graphInputs() const { return graphInputs_; }
  const std::vector<std::string>& outputs() const { return outputs_; }

private:
  // Places and routes `file`'s submodules, whose graphs are `graphs` (same order).
  static Expected<LoadedPlan> assemble(const std::string& dir, plan::PlanFile file,
                                       std::vector<std::shared_ptr<const ir::Graph>> graphs, int worldSize,
                                       pipeline::Placement placement);
  void addRoutes(std::uint32_t submodule);
  std::uint32_t idOf(const std::string& name);

  std::string dir_;
  plan::PlanFile file_;
  int worldSize_ = 1;
  std::vector<PlacedSubmodule> submodules_;
  std::vector<ValueRoute> routes_;
  std::map<std::string, std::uint32_t> ids_;
  std::vector<std::string> graphInputs_, outputs_;
};

} // namespace cleave::runtime
