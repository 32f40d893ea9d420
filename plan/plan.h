// plan/plan.h - the one plan type every cutting pass returns: which nodes go to which submodule,
// in what order, on which devices, and why a node sits where its pass did not prefer. The plan
// speaks no pass's vocabulary: a placement reason is a code the pass defines (the split's are in
// split/placement_reason.h) plus a detail, rendered to text by report/. Materializing a plan
// (submodels, plan.json) is plan/materialize.h; checking one is plan::verify.
// Complexity: plan::verify is O(V + E); reasonOf is a binary search, O(log reasons).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/enum_table.h"
#include "base/expected.h"
#include "base/ids.h"
#include "ir/graph.h"

namespace cleave::plan {

enum class PlanKind : std::uint8_t { Split, Partition, Pipeline };
inline constexpr auto kPlanKinds = enumTable<PlanKind>(
    {{PlanKind::Split, "split"}, {PlanKind::Partition, "partition"}, {PlanKind::Pipeline, "pipeline"}});
std::string_view planKindName(PlanKind kind);

// What a submodule is for: where a runner puts it.
enum class SubmoduleRole : std::uint8_t {
  Accelerator, // a split's accelerator side
  Cpu,         // a split's CPU side
  Partition,   // one partition of a multi-device partition (runs on its devices)
  Stage,       // one pipeline stage
};
inline constexpr auto kSubmoduleRoles = enumTable<SubmoduleRole>({{SubmoduleRole::Accelerator, "acc"},
                                                                 {SubmoduleRole::Cpu, "cpu"},
                                                                 {SubmoduleRole::Partition, "partition"},
                                                                 {SubmoduleRole::Stage, "stage"}});
// Whether a runner puts a submodule of this role on the accelerator backend: a split's acc side and
// every partition (a pipeline stage runs on its rank's backend).
inline bool runsOnAccelerator(SubmoduleRole role) {
  return role == SubmoduleRole::Accelerator || role == SubmoduleRole::Partition;
}

struct Submodule {
  std::string name; // "_run_on_acc_0", "_run_on_cpu_1", "partition_0", "stage_0", ...
  SubmoduleRole role = SubmoduleRole::Cpu;
  std::vector<ir::NodeId> nodes;       // topological order
  std::vector<std::int64_t> devices;   // logical device ids (partitions); empty: the role decides
  std::int64_t memoryLimitBytes = -1;  // the smallest of its devices' memory; -1: none
  friend bool operator==(const Submodule&, const Submodule&) = default;
};

// Why a callable node sits where it does, when that is not where its pass would have put it
// (for the split: off the accelerator). `code` is the pass's own reason enum.
struct PlacementReason {
  ir::NodeId node;
  std::uint8_t code = 0;
  std::string detail; // the rule or value behind it
  friend bool operator==(const PlacementReason&, const PlacementReason&) = default;
};

inline constexpr std::uint32_t kNoSubmodule = UINT32_MAX;

struct CutPlan {
  PlanKind kind = PlanKind::Split;
  std::vector<Submodule> submodules;               // execution order
  IdVector<ir::NodeId, std::uint32_t> submoduleOf; // kNoSubmodule for non-callable nodes
  std::vector<PlacementReason> reasons;            // ascending node id, at most one per node
  std::vector<std::string> remarks;                // non-fatal notes, in order
  friend bool operator==(const CutPlan&, const CutPlan&) = default;
};

// Rebuilds submoduleOf from the submodule lists.
void indexSubmodules(const ir::Graph& graph, CutPlan& plan);

// The reason recorded for `node`, or nullptr. O(log reasons).
const PlacementReason* reasonOf(const CutPlan& plan, ir::NodeId node);

// Checks what every consumer of a plan relies on: each callable node is in exactly one submodule
// and no other node is in any; submoduleOf agrees with the lists; each submodule lists its nodes
// in topological order; no submodule reads a value made by a later one (so running them in order
// respects every dependency and the submodule graph is acyclic); a submodule with a memory limit
// holds parameters that fit it; reasons are sorted, unique and name callable nodes.
// Fails: InvalidGraph naming the first broken rule. O(V + E).
[[nodiscard]] Status verify(const ir::Graph& graph, const CutPlan& plan);

} // namespace cleave::plan
