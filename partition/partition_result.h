// partition/partition_result.h - what every partition mode returns: the cut as a plan (one
// submodule per partition, in an order whose graph runs forward) and, per partition, its logical
// devices and the bytes it holds. Building one is O(nodes of the graph + partition nodes).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "plan/plan.h"

namespace cleave::partition {

struct PartitionInfo {
  std::vector<std::int64_t> logicalDeviceIds; // its device first, then its replicas
  std::int64_t usedMemBytes = 0;
};

struct PartitionResult {
  plan::CutPlan plan;                   // submodules "partition_<id>", in order
  std::vector<PartitionInfo> partitions; // same order
  bool singlePartition = false;         // the whole model fits one device
};

// An empty result of kind Partition for `graph`: add partitions, then finishPartitionResult.
PartitionResult startPartitionResult(const ir::Graph& graph);
// Appends partition "partition_<id>" holding `nodes` (callable nodes, any order: kept sorted).
void appendPartition(PartitionResult& result, std::int64_t id, std::vector<ir::NodeId> nodes,
                     std::vector<std::int64_t> logicalDeviceIds, std::int64_t usedMemBytes);
// Indexes node -> partition once every partition is in.
void finishPartitionResult(const ir::Graph& graph, PartitionResult& result);

} // namespace cleave::partition
