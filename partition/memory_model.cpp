#include "partition/memory_model.h"

#include <algorithm>

namespace cleave::partition {
using ir::NodeId;

IdVector<NodeId, NodeSize> computeNodeSizes(const ir::Graph& graph) {
  IdVector<NodeId, NodeSize> sizes(graph.numNodes());
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    if (graph.kind(node) == ir::NodeKind::Output)
      continue;
    std::int64_t outputBytes = 0, outputElements = 0;
    int elementSize = 0;
    for (ir::ValueId value : graph.outputs(node)) {
      std::int64_t bytes = std::max<std::int64_t>(graph.bytes(value), 0);
      outputBytes += bytes;
      int size = graph.valueKind(value) == ir::ValueKind::Tensor ? ir::dtypeSize(graph.dtype(value)) : 0;
      if (size > 0) {
        outputElements += bytes / size;
        elementSize = elementSize ? elementSize : size;
      }
    }
    std::int64_t paramElements = 0;
    if (graph.kind(node) != ir::NodeKind::Parameter)
      for (ir::ParamId param : graph.parameters(node)) {
        const ir::Parameter& p = graph.parameter(param);
        if (p.isBuffer())
          continue; // torch counts named_parameters() only
        std::int64_t elements = 1;
        for (std::int64_t d : p.dims)
          elements *= d;
        paramElements += elements;
      }
    sizes[node].outputBytes = outputBytes;
    sizes[node].totalBytes = elementSize ? (paramElements + outputElements) * elementSize : outputBytes;
  }
  return sizes;
}

std::vector<NodeId> inputNodesOf(const ir::Graph& graph, NodeId node) {
  std::vector<NodeId> producers;
  for (ir::ValueId value : graph.inputs(node))
    if (value != ir::kNoValue) {
      NodeId producer = graph.producer(value);
      if (std::find(producers.begin(), producers.end(), producer) == producers.end())
        producers.push_back(producer);
    }
  return producers;
}

std::int64_t extraSizeOf(const ir::Graph& graph, const IdVector<NodeId, NodeSize>& sizes, NodeId node,
                         const IdVector<NodeId, std::uint8_t>& members) {
  std::int64_t bytes = sizes[node].totalBytes;
  for (NodeId input : inputNodesOf(graph, node))
    if (!members[input])
      bytes += sizes[input].outputBytes;
  return bytes;
}

std::int64_t memoryOfMembers(const ir::Graph& graph, const IdVector<NodeId, NodeSize>& sizes,
                             const std::vector<NodeId>& members, IdVector<NodeId, std::uint8_t>& scratch) {
  for (NodeId member : members)
    scratch[member] = 1;
  std::int64_t bytes = 0;
  for (NodeId member : members)
    bytes += extraSizeOf(graph, sizes, member, scratch);
  for (NodeId member : members)
    scratch[member] = 0;
  return bytes;
}

std::int64_t addToPartition(const ir::Graph& graph, const IdVector<NodeId, NodeSize>& sizes, NodeId node,
                            std::vector<NodeId>& members, IdVector<NodeId, std::uint8_t>& inPartition) {
  std::int64_t grown = extraSizeOf(graph, sizes, node, inPartition);
  for (NodeId input : inputNodesOf(graph, node)) {
    ir::NodeKind kind = graph.kind(input);
    if ((kind == ir::NodeKind::Input || kind == ir::NodeKind::Parameter) && !inPartition[input]) {
      inPartition[input] = 1;
      members.push_back(input);
      grown += sizes[input].totalBytes - sizes[input].outputBytes; // now counted as a member
    }
  }
  inPartition[node] = 1;
  members.push_back(node);
  return grown;
}

} // namespace cleave::partition
