// partition/memory_model.h - bytes a node and a partition need, with torch's partitioner
// semantics (graph_manipulation.get_size_of_node, partitioner_utils.get_extra_size_of):
//   node output size = its output tensor's bytes;
//   node total size  = (elements of the parameters it owns + elements of its output) x the
//                      output's element size (FX: a call_module's parameters, not its buffers;
//                      ONNX: an initializer owns itself);
//   a node added to a partition costs its total size plus the output size of each distinct
//   input not in the partition; graph inputs and constants it reads join the partition, so
//   those used by several partitions count in each.
// Complexity: O(V + E) for all node sizes.
#pragma once

#include "ir/graph.h"

namespace cleave::partition {

struct NodeSize {
  std::int64_t outputBytes = 0;
  std::int64_t totalBytes = 0;
};

IdVector<ir::NodeId, NodeSize> computeNodeSizes(const ir::Graph& graph);

// Distinct producers of a node's operands, in operand order.
std::vector<ir::NodeId> inputNodesOf(const ir::Graph& graph, ir::NodeId node);

// get_extra_size_of: the node's total size plus the output size of each input not in `members`.
std::int64_t extraSizeOf(const ir::Graph& graph, const IdVector<ir::NodeId, NodeSize>& sizes,
                         ir::NodeId node, const IdVector<ir::NodeId, std::uint8_t>& members);

// Partition.recalculate_mem_size: the sum of extraSizeOf over `members` against themselves.
// `scratch` is all zeros on entry and on return.
std::int64_t memoryOfMembers(const ir::Graph& graph, const IdVector<ir::NodeId, NodeSize>& sizes,
                             const std::vector<ir::NodeId>& members, IdVector<ir::NodeId, std::uint8_t>& scratch);

// Partition.add_node: appends `node` and the graph inputs and constants it reads (not yet
// members) to `members`, keeps the flags `inPartition` equal to `members`, and returns the bytes
// the partition grows by. Precondition: no member reads `node` (nodes join in topological order).
std::int64_t addToPartition(const ir::Graph& graph, const IdVector<ir::NodeId, NodeSize>& sizes, ir::NodeId node,
                            std::vector<ir::NodeId>& members, IdVector<ir::NodeId, std::uint8_t>& inPartition);

} // namespace cleave::partition
