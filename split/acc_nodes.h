// split/acc_nodes.h - the nodes the accelerator will run, before subgraphs are formed.
//
// Semantics of torch.fx's FxNetAccNodesFinder: start from the callable nodes the profile
// supports; unless allowNonTensor, (1) drop every acc node fed a non-tensor value by a CPU node,
// transitively through acc nodes that themselves produce non-tensors, and (2) drop acc nodes that
// produce a non-tensor value read by a CPU node (the graph output counts as CPU), repeating (1)
// from them, until nothing changes. "Tensor output" is torch's is_node_output_tensor: the value is
// a single tensor (a tuple of tensors is not).
// Guarantees: the result does not depend on visiting order (both reductions only remove nodes and
// their conditions are monotone, so the fixpoint is unique).
// Complexity: O(V + E) per round of (2); rounds are bounded by the longest chain of non-tensor
// producers, O(V (V + E)) in the worst case and O(V + E) in practice.
#pragma once

#include "ir/graph.h"
#include "split/placement_reason.h"
#include "support/profile.h"

namespace cleave::split {

struct AccNodes {
  IdVector<ir::NodeId, std::uint8_t> isAcc;     // 1 for accelerator nodes
  IdVector<ir::NodeId, SplitReason> reason;     // why a callable node is not (or is) on it
  IdVector<ir::NodeId, std::string> detail;     // the rule or value behind a CPU reason
};

bool producesTensor(const ir::Graph& graph, ir::NodeId node);
// FX's "tensor_meta" test: a tensor, or a container holding tensors.
bool hasTensorMeta(const ir::Graph& graph, ir::NodeId node);

AccNodes findAccNodes(const ir::Graph& graph, const IdVector<ir::NodeId, support::Decision>& decisions,
                      bool allowNonTensor);

} // namespace cleave::split
