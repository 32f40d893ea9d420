// plan/plan.h - the one plan type every cutting pass returns: which nodes go to which submodule,
// in what order, and why. Materializing it (submodels, plan.json) is plan/materialize.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/ids.h"
#include "ir/graph.h"

namespace cleave::plan {

enum class PlanKind : std::uint8_t { Split, Partition, Pipeline };
std::string_view planKindName(PlanKind kind);

// Why a callable node sits where it does.
enum class Placement : std::uint8_t {
  Accelerator,       // supported and kept on the accelerator
  Unsupported,       // the profile said no (the detail says which rule)
  NonTensorBoundary, // supported, but would pass non-tensor data to or from the CPU
  FusionGroup,       // supported, but its fusion group holds an unsupported node
  BelowMinSize,      // its acc subgraph was smaller than --min-acc-size
  MaxSplitsMerge,    // its acc subgraph was merged back to meet --max-acc-splits
  NotPlaced,         // inputs, parameters, output: not part of any submodule
};
std::string_view placementName(Placement placement);

struct Submodule {
  std::string name; // "_run_on_acc_0", "_run_on_cpu_1", ...
  bool isAcc = false;
  std::vector<ir::NodeId> nodes; // topological order
  friend bool operator==(const Submodule&, const Submodule&) = default;
};

inline constexpr std::uint32_t kNoSubmodule = UINT32_MAX;

struct CutPlan {
  PlanKind kind = PlanKind::Split;
  std::vector<Submodule> submodules;             // execution order
  IdVector<ir::NodeId, std::uint32_t> submoduleOf; // kNoSubmodule for non-callable nodes
  IdVector<ir::NodeId, Placement> placement;
  IdVector<ir::NodeId, std::string> detail;       // the rule behind a CPU placement
  std::vector<std::string> remarks;               // non-fatal notes, in order
  friend bool operator==(const CutPlan&, const CutPlan&) = default;
};

// Rebuilds submoduleOf from the submodule lists.
void indexSubmodules(const ir::Graph& graph, CutPlan& plan);

} // namespace cleave::plan
