#include "partition/kl_based.h"

#include <algorithm>

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
  // Callable nodes per partition, in id order; updated as moves are applied.
  std::vector<std::vector<NodeId>> members(count);
  for (NodeId node : model.callable())
    members[partitionOf[node]].push_back(node);
  auto moveNode = [&](NodeId node, std::uint32_t from, std::uint32_t to) {
    auto& source = members[from];
    source.erase(std::lower_bound(source.begin(), source.end(), node));
    auto& target = members[to];
    target.insert(std::upper_bound(target.begin(), target.end(), node), node);
    partitionOf[node] = to;
  };
  for (int pass = 0; pass < kMaxKlPasses; ++pass) {
    bool improved = false;
    for (NodeId node : model.callable()) {
      if (!onBoundary(graph, partitionOf, node))
        continue;
      std::uint32_t from = partitionOf[node];
      double bestCost = current.criticalPathSec;
      std::optional<AssignmentCost> best;
      std::pair<std::uint32_t, NodeId> bestMove{0, NodeId{UINT32_MAX}}; // (to, partner)
      for (std::uint32_t to = 0; to < count; ++to) {
        if (to == from || members[to].empty())
          continue;
        // Candidates: move alone (partner none), or exchange with a boundary node of `to`.
        std::vector<NodeId> partners{NodeId{UINT32_MAX}};
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
            bestMove = {to, partner};
          }
        }
      }
      if (best) {
        current = std::move(*best);
        moveNode(node, from, bestMove.first);
        if (index(bestMove.second) != UINT32_MAX)
          moveNode(bestMove.second, bestMove.first, from);
        improved = true;
      }
    }
    if (!improved)
      break;
  }
  return model.toResult(current);
}

} // namespace cleave::partition
