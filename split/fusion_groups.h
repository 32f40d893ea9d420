// split/fusion_groups.h - groups of nodes that pass non-tensor data among themselves and must
// therefore run in one submodule (torch.fx's FxNetAccFusionsFinder).
//
// A group grows from an accelerator node without tensor metadata (no tensor among its outputs)
// as in the reference: it takes every user of a member without tensor metadata, and every input
// without tensor metadata. Unlike the reference, which adds the first
// path it meets in set order, cleave then adds every node on a path between two members (the
// convex closure), so a group can always be contracted without a cycle and the result does not
// depend on iteration order. Groups that overlap are merged, so no node is in two groups (the
// reference lets them overlap and can then fail with "Subgraph can't be empty").
// Groups whose contraction would close a cycle between them (A reaches B and B reaches A) are
// merged, so the sweep can always place every node (the reference can deadlock there).
// A group holding any CPU node sends all its members to the CPU (placement FusionGroup).
// Complexity: O(sum over groups of the topological window they span, plus its edges), plus
// O(V + E) per round of cycle merging (rounds: at most the number of groups; none without groups).
#pragma once

#include "split/acc_nodes.h"

namespace cleave::split {

inline constexpr std::uint32_t kNoGroup = UINT32_MAX;

struct FusionGroups {
  IdVector<ir::NodeId, std::uint32_t> groupOf; // kNoGroup when the node is in none
  std::vector<std::vector<ir::NodeId>> groups; // members in id order; dissolved groups are empty
};

// Finds the groups among acc nodes and demotes the members of groups that are not all on the
// accelerator (updates `acc`).
FusionGroups findFusionGroups(const ir::Graph& graph, AccNodes& acc);

// A group with any CPU member sends all its members to the CPU (placement FusionGroup) and is
// dissolved. findFusionGroups applies it; the splitter again after later demotions.
void dissolveGroupsWithCpuMembers(const ir::Graph& graph, FusionGroups& fusion, AccNodes& acc);

} // namespace cleave::split
