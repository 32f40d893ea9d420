// split/splitter.h - cut a graph into alternating accelerator and CPU submodules.
//
// Semantics of torch.fx's _SplitterBase (put_nodes_into_subgraphs, remove_small_acc_subgraphs,
// tag): a sweep takes, while it can, every node of the current kind (acc or cpu) whose
// dependencies are all placed, then closes the subgraph and switches kind; fusion groups make
// their members depend on the group's outside dependencies and their outside users on every
// member. It starts with CPU when a CPU node is ready at the start. Acc subgraphs smaller than
// minAccSize join the CPU subgraph before them (or become one). Names: "_run_on_acc_<i>" and
// "_run_on_cpu_<i>", i = position.
// Beyond the reference: merging small (or, below, surplus) acc subgraphs into the CPU can leave
// a non-tensor value crossing between acc and cpu; unless allowNonTensor, the acc side of such an
// edge is demoted (NonTensorBoundary) and the sweep runs again, so the rule always holds.
// Also beyond the reference: maxSplits > 0 steers instead of failing: while there are more than
// maxSplits submodules, the acc subgraph that moves the least work per byte crossing its
// boundary (work = its node count; ties: the earlier one) is merged back to the CPU.
// Guarantees: each callable node is in exactly one submodule; acc submodules hold only acc nodes;
// executing submodules in order respects every dependency (each lists its nodes topologically).
// Determinism: within a sweep phase, ready nodes are taken in NodeId order. Phase node sets equal
// the reference's (a phase takes the closure of ready nodes, which is order-independent).
// Complexity: O((V + E) log V + F) where F is the size of the fusion-group dependencies.
#pragma once

#include "plan/plan.h"
#include "split/acc_nodes.h"
#include "support/profile.h"

namespace cleave::split {

struct SplitOptions {
  std::int64_t minAccSize = 1;  // torch's min_acc_module_size
  std::int64_t maxSplits = 0;   // 0: no limit; else the most submodules (acc + cpu) allowed
  bool skipFusion = false;
  bool allowNonTensor = false;
  // torch's extend_acc_subgraph, applied to every acc submodule in order: acc nodes feeding the
  // submodule move into it once all their users in earlier submodules have moved (fusion groups
  // move whole). Submodules left empty are dropped; the others keep their names.
  bool extendAcc = false;
  // torch's move_non_tensor_nodes_on_boundary (split_utils): a non-tensor node of an acc
  // submodule whose users sit in one other submodule moves there, with its descendants in the
  // same submodule, when none of them reaches a third submodule. Matters with allowNonTensor
  // (without it no non-tensor value crosses submodules at all).
  bool moveNonTensorBoundary = false;
};

struct SubgraphCounts {
  std::uint32_t acc = 0, cpu = 0;
};

struct SplitResult {
  plan::CutPlan plan;
  SubgraphCounts beforeMinSize, afterMinSize; // the reference's split_preview counts
  std::uint32_t fusionGroups = 0;
};

// Fails: InvalidArgument for bad options; never for a valid graph.
[[nodiscard]] Expected<SplitResult> splitGraph(const ir::Graph& graph,
                                               const IdVector<ir::NodeId, support::Decision>& decisions,
                                               const SplitOptions& options);

} // namespace cleave::split
