#include "plan/plan.h"

namespace cleave::plan {

std::string_view planKindName(PlanKind kind) {
  switch (kind) {
  case PlanKind::Split: return "split";
  case PlanKind::Partition: return "partition";
  case PlanKind::Pipeline: return "pipeline";
  }
  return "?";
}

std::string_view placementName(Placement placement) {
  switch (placement) {
  case Placement::Accelerator: return "accelerator";
  case Placement::Unsupported: return "unsupported";
  case Placement::NonTensorBoundary: return "non-tensor boundary";
  case Placement::FusionGroup: return "fusion group";
  case Placement::BelowMinSize: return "subgraph below minimum size";
  case Placement::MaxSplitsMerge: return "merged for max splits";
  case Placement::NotPlaced: return "not placed";
  }
  return "?";
}

void indexSubmodules(const ir::Graph& graph, CutPlan& plan) {
  plan.submoduleOf = IdVector<ir::NodeId, std::uint32_t>(graph.numNodes(), kNoSubmodule);
  for (std::uint32_t s = 0; s < plan.submodules.size(); ++s)
    for (ir::NodeId node : plan.submodules[s].nodes)
      plan.submoduleOf[node] = s;
}

} // namespace cleave::plan
