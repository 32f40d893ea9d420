#include "partition/assignment_cost.h"

#include <algorithm>
#include <queue>

namespace cleave::partition {
using ir::NodeId;

AssignmentCostModel::AssignmentCostModel(const ir::Graph& graph, const DeviceSet& devices,
                                         const DeviceSupport* support,
                                         const IdVector<NodeId, NodeLatency>& latencies, TransferRates rates)
    : graph_(graph), devices_(devices), latencies_(latencies), rates_(rates), sizes_(computeNodeSizes(graph)),
      mapper_(graph, sizes_, devices, support), scratch_(graph.numNodes(), 0) {
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n)
    if (graph.isCallable(NodeId{n}))
      callable_.push_back(NodeId{n});
}

AssignmentCost AssignmentCostModel::evaluate(const IdVector<NodeId, std::uint32_t>& partitionOf, std::uint32_t count,
                                             const std::vector<std::vector<std::int64_t>>* keepDevices) {
  AssignmentCost result;
  // Group nodes; ids are topological, so each group is in topological order.
  std::vector<std::vector<NodeId>> groups(count);
  for (NodeId node : callable_)
    groups[partitionOf[node]].push_back(node);
  // Partition graph edges (callable flow) and a topological order, ties by first node.
  std::vector<std::vector<std::uint32_t>> children(count);
  std::vector<std::uint32_t> indegree(count, 0);
  for (NodeId node : callable_) {
    std::uint32_t from = partitionOf[node];
    for (ir::ValueId value : graph_.outputs(node))
      for (NodeId user : graph_.users(value)) {
        if (!graph_.isCallable(user))
          continue;
        std::uint32_t to = partitionOf[user];
        if (to != from && std::find(children[from].begin(), children[from].end(), to) == children[from].end()) {
          children[from].push_back(to);
          ++indegree[to];
        }
      }
  }
  using Entry = std::pair<std::uint32_t, std::uint32_t>; // (first node, partition id)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> ready;
  std::uint32_t nonEmpty = 0;
  for (std::uint32_t p = 0; p < count; ++p)
    if (!groups[p].empty()) {
      ++nonEmpty;
      if (indegree[p] == 0)
        ready.push({index(groups[p].front()), p});
    }
  std::vector<std::uint32_t> order;
  while (!ready.empty()) {
    std::uint32_t p = ready.top().second;
    ready.pop();
    order.push_back(p);
    for (std::uint32_t c : children[p])
      if (--indegree[c] == 0)
        ready.push({index(groups[c].front()), c});
  }
  if (order.size() != nonEmpty)
    return result; // a cycle
  result.partitions.reserve(order.size());
  for (std::uint32_t p : order) {
    result.partitions.push_back(makePartition(graph_, sizes_, std::move(groups[p]), scratch_));
    if (keepDevices)
      result.partitions.back().deviceIds = (*keepDevices)[p];
  }
  if (mapper_.map(result.partitions))
    return result; // some partition fits no device
  // Only what the latency functions read: the submodule lists and submoduleOf.
  plan::CutPlan plan;
  plan.submoduleOf = IdVector<NodeId, std::uint32_t>(graph_.numNodes(), plan::kNoSubmodule);
  for (std::uint32_t p = 0; p < result.partitions.size(); ++p) {
    for (NodeId node : result.partitions[p].nodes)
      plan.submoduleOf[node] = p;
    plan.submodules.push_back({"", plan::SubmoduleRole::Partition, result.partitions[p].nodes, {}, -1});
  }
  std::vector<PartitionLatency> perPartition = partitionLatencies(graph_, plan, latencies_);
  std::vector<std::vector<std::int64_t>> deviceIds;
  for (const MappedPartition& partition : result.partitions)
    deviceIds.push_back(partition.deviceIds);
  Expected<CriticalPath> path = criticalPath(graph_, plan, deviceIds, perPartition, sizes_, rates_);
  if (path)
    result.criticalPathSec = path->latencySec;
  return result;
}

PartitionResult AssignmentCostModel::toResult(const AssignmentCost& cost) const {
  PartitionResult result = startPartitionResult(graph_);
  for (std::size_t p = 0; p < cost.partitions.size(); ++p)
    appendPartition(result, p, cost.partitions[p].nodes, cost.partitions[p].deviceIds, cost.partitions[p].usedBytes);
  finishPartitionResult(graph_, result);
  return result;
}

} // namespace cleave::partition
