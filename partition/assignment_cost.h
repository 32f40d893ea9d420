// partition/assignment_cost.h - the cost of a node -> partition assignment, as torch's
// cost-aware modes measure it (cost_aware_partition, kl_based_partition):
//   1. the partitions must not depend on each other in a cycle (check_dependency);
//   2. they are mapped onto the devices from scratch (get_device_to_partitions_mapping, in the
//      order below), unless `keepDevices` carries a mapping to keep;
//   3. the cost is the critical path (latency.h) with those devices.
// Partitions are ordered topologically, ties by their first node; their nodes in id order.
// Complexity: O(V + E + D x V) per evaluation, plus the critical path's O(P log P).
#pragma once

#include <limits>

#include "partition/device_mapping.h"
#include "partition/latency.h"
#include "partition/size_based.h"

namespace cleave::partition {

inline constexpr double kInfeasible = std::numeric_limits<double>::infinity();

struct AssignmentCost {
  double criticalPathSec = kInfeasible; // kInfeasible: a cycle, or no device mapping
  std::vector<MappedPartition> partitions;
};

class AssignmentCostModel {
public:
  AssignmentCostModel(const ir::Graph& graph, const DeviceSet& devices, const DeviceSupport* support,
                      const IdVector<ir::NodeId, NodeLatency>& latencies, TransferRates rates);

  // `partitionOf[n]` for every callable node (values below `count`; others ignored). An empty
  // partition id is dropped. `keepDevices`, when given, holds each partition id's devices.
  AssignmentCost evaluate(const IdVector<ir::NodeId, std::uint32_t>& partitionOf, std::uint32_t count,
                          const std::vector<std::vector<std::int64_t>>* keepDevices = nullptr);

  // The result for the CLI: partitions "partition_<i>" in the evaluated order.
  PartitionResult toResult(const AssignmentCost& cost) const;

  const ir::Graph& graph() const { return graph_; }
  const IdVector<ir::NodeId, NodeSize>& sizes() const { return sizes_; }
  const std::vector<ir::NodeId>& callable() const { return callable_; }

private:
  const ir::Graph& graph_;
  const DeviceSet& devices_;
  const IdVector<ir::NodeId, NodeLatency>& latencies_;
  TransferRates rates_;
  IdVector<ir::NodeId, NodeSize> sizes_;
  std::vector<ir::NodeId> callable_;
  DeviceMapper mapper_;
  IdVector<ir::NodeId, std::uint8_t> scratch_;
};

} // namespace cleave::partition
