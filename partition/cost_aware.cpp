#include "partition/cost_aware.h"

#include <algorithm>

#include "partition/assignment_cost.h"
#include "partition/optimal.h"

namespace cleave::partition {
using ir::NodeId;

namespace {

// The assignment of an evaluated partition list: node -> index in the list.
IdVector<NodeId, std::uint32_t> assignmentOf(const ir::Graph& graph, const std::vector<MappedPartition>& partitions) {
  IdVector<NodeId, std::uint32_t> partitionOf(graph.numNodes(), 0);
  for (std::uint32_t p = 0; p < partitions.size(); ++p)
    for (NodeId node : partitions[p].nodes)
      partitionOf[node] = p;
  return partitionOf;
}

// torch's merge search from `start` (feasible). Returns the final evaluation.
AssignmentCost mergeSearch(AssignmentCostModel& model, AssignmentCost current) {
  const ir::Graph& graph = model.graph();
  while (current.partitions.size() > 1) {
    std::uint32_t count = static_cast<std::uint32_t>(current.partitions.size());
    IdVector<NodeId, std::uint32_t> partitionOf = assignmentOf(graph, current.partitions);
    // Parent/child pairs and BFS levels (torch's get_bfs_level_partition keeps the last level a
    // partition is reached at: the longest path from a root, in edges). The list is topological.
    std::vector<std::vector<std::uint8_t>> adjacent(count, std::vector<std::uint8_t>(count, 0));
    std::vector<std::uint32_t> level(count, 0);
    for (std::uint32_t p = 0; p < count; ++p)
      for (NodeId node : current.partitions[p].nodes)
        for (ir::ValueId value : graph.outputs(node))
          for (NodeId user : graph.users(value))
            if (graph.isCallable(user) && partitionOf[user] != p) {
              std::uint32_t c = partitionOf[user];
              adjacent[p][c] = adjacent[c][p] = 1;
              level[c] = std::max(level[c], level[p] + 1);
            }
    double bestCost = current.criticalPathSec;
    AssignmentCost best;
    bool found = false;
    for (std::uint32_t i = 0; i + 1 < count; ++i)
      for (std::uint32_t j = i + 1; j < count; ++j) {
        std::uint32_t gap = level[i] > level[j] ? level[i] - level[j] : level[j] - level[i];
        if (gap > 1 && !adjacent[i][j])
          continue;
        IdVector<NodeId, std::uint32_t> merged = partitionOf;
        for (NodeId node : current.partitions[j].nodes)
          merged[node] = i;
        AssignmentCost trial = model.evaluate(merged, count);
        if (trial.criticalPathSec <= bestCost && trial.criticalPathSec < kInfeasible) {
          bestCost = trial.criticalPathSec;
          best = std::move(trial);
          found = true;
        }
      }
    if (!found)
      break;
    current = std::move(best);
  }
  return current;
}

} // namespace

Expected<PartitionResult> partitionCostAware(const ir::Graph& graph, const DeviceSet& devices,
                                             const IdVector<NodeId, NodeLatency>& latencies,
                                             const TransferRates& rates) {
  CLEAVE_TRY(std::optional<PartitionResult> whole, placeWholeModel(graph, devices));
  if (whole)
    return std::move(*whole);
  CLEAVE_TRY(std::optional<DeviceSupport> support, supportOf(graph, devices));
  AssignmentCostModel model(graph, devices, support ? &*support : nullptr, latencies, rates);
  std::optional<AssignmentCost> chosen;
  auto consider = [&](AssignmentCost start) {
    if (start.criticalPathSec == kInfeasible)
      return;
    AssignmentCost searched = mergeSearch(model, std::move(start));
    if (!chosen || searched.criticalPathSec < chosen->criticalPathSec)
      chosen = std::move(searched);
  };
  const std::vector<NodeId>& callable = model.callable();
  if (callable.size() <= kSingleNodeSearchLimit) {
    IdVector<NodeId, std::uint32_t> single(graph.numNodes(), 0);
    for (std::uint32_t k = 0; k < callable.size(); ++k)
      single[callable[k]] = k;
    consider(model.evaluate(single, static_cast<std::uint32_t>(callable.size())));
  }
  Expected<PartitionResult> contiguous = partitionOptimal(graph, devices, latencies, rates, Objective::CriticalPath);
  if (!contiguous && contiguous.error().code() == ErrorCode::DoesNotFit)
    contiguous = partitionBySize(graph, devices);
  if (!contiguous)
    return contiguous.error();
  {
    std::uint32_t count = static_cast<std::uint32_t>(contiguous->plan.submodules.size());
    std::vector<std::vector<std::int64_t>> keep;
    for (const PartitionInfo& info : contiguous->partitions)
      keep.push_back(info.logicalDeviceIds);
    consider(model.evaluate(contiguous->plan.submoduleOf, count, &keep));
  }
  if (!chosen)
    return Error(ErrorCode::DoesNotFit) << "cost_aware found no partitioning that maps onto the devices";
  return model.toResult(*chosen);
}

} // namespace cleave::partition
