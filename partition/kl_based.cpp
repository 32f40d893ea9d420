#include "partition/kl_based.h"

#include "partition/assignment_cost.h"

namespace cleave::partition {
using ir::NodeId;

namespace {
// True when a callable producer or user of `node` sits in another partition.
bool onBoundary(const ir::Graph& graph, const IdVector<NodeId, std::uint32_t>& partitionOf, NodeId node) {
  std::uint32_t own = partitionOf[node];
  for (ir::ValueId value : graph.inputs(node))
    if (value != ir::kNoValue) {
      NodeId producer = graph.producer(value);
      if (graph.isCallable(producer) && partitionOf[producer] != own)
        return true;
    }
  for (ir::ValueId value : graph.outputs(node))
    for (NodeId user : graph.users(value))
      if (graph.isCallable(user) && partitionOf[user] != own)
        return true;
  return false;
}
} // namespace

Expected<PartitionResult> partitionKlBased(const ir::Graph& graph, const DeviceSet& devices,
                                           const IdVector<NodeId, NodeLatency>& latencies,
                                           const TransferRates& rates) {
  CLEAVE_TRY(PartitionResult start, partitionBySize(graph, devices));
  if (start.singlePartition)
    return start;
  CLEAVE_TRY(std::optional<DeviceSupport> support, supportOf(graph, devices));
  AssignmentCostModel model(graph, devices, support ? &*support : nullptr, latencies, rates);
  const std::uint32_t count = static_cast<std::uint32_t>(start.plan.submodules.size());
  std::vector<std::vector<std::int64_t>> keep;
  for (const PartitionInfo& info : start.partitions)
    keep.push_back(info.logicalDeviceIds);
  IdVector<NodeId, std::uint32_t> partitionOf = start.plan.submoduleOf;
  AssignmentCost current = model.evaluate(partitionOf, count, &keep);
  if (current.criticalPathSec == kInfeasible)
    return start; // size_based's partitions with their own mapping are always feasible; keep them
  const std::vector<NodeId>& callable = model.callable();
  std::vector<std::vector<NodeId>> members(count);
  for (int pass = 0; pass < kMaxKlPasses; ++pass) {
    bool improved = false;
    for (NodeId node : callable) {
      if (!onBoundary(graph, partitionOf, node))
        continue;
      for (auto& list : members)
        list.clear();
      for (NodeId other : callable)
        members[partitionOf[other]].push_back(other);
      std::uint32_t from = partitionOf[node];
      double bestCost = current.criticalPathSec;
      std::optional<AssignmentCost> best;
      IdVector<NodeId, std::uint32_t> bestAssignment;
      for (std::uint32_t to = 0; to < count; ++to) {
        if (to == from || members[to].empty())
          continue;
        // Candidates: move alone (partner none), or exchange with a boundary node of `to`.
        std::vector<NodeId> partners{ir::NodeId{UINT32_MAX}};
        for (NodeId other : members[to])
          if (onBoundary(graph, partitionOf, other))
            partners.push_back(other);
        for (NodeId partner : partners) {
          IdVector<NodeId, std::uint32_t> trialAssignment = partitionOf;
          trialAssignment[node] = to;
          if (index(partner) != UINT32_MAX)
            trialAssignment[partner] = from;
          AssignmentCost trial = model.evaluate(trialAssignment, count);
          if (trial.criticalPathSec < bestCost) {
            bestCost = trial.criticalPathSec;
            best = std::move(trial);
            bestAssignment = std::move(trialAssignment);
          }
        }
      }
      if (best) {
        current = std::move(*best);
        partitionOf = std::move(bestAssignment);
        improved = true;
      }
    }
    if (!improved)
      break;
  }
  return model.toResult(current);
}

} // namespace cleave::partition
