#include "partition/partition_result.h"

#include <algorithm>
#include <string>

namespace cleave::partition {

PartitionResult startPartitionResult(const ir::Graph& graph) {
  PartitionResult result;
  result.plan.kind = plan::PlanKind::Partition;
  return result;
}

void appendPartition(PartitionResult& result, std::int64_t id, std::vector<ir::NodeId> nodes,
                     std::vector<std::int64_t> logicalDeviceIds, std::int64_t usedMemBytes) {
  std::sort(nodes.begin(), nodes.end());
  result.plan.submodules.push_back({"partition_" + std::to_string(id), plan::SubmoduleRole::Partition, std::move(nodes), {}, -1});
  result.partitions.push_back({std::move(logicalDeviceIds), usedMemBytes});
}

void finishPartitionResult(const ir::Graph& graph, PartitionResult& result) {
  plan::indexSubmodules(graph, result.plan);
}

} // namespace cleave::partition
