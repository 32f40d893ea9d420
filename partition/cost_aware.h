// partition/cost_aware.h - torch's cost_aware_partition: merge partitions while the critical
// path does not grow.
//
// The search (search_combination in torch): given partitions, try merging every pair that sits
// on the same or adjacent BFS levels of the partition graph, or that are parent and child; keep
// the merge with the lowest cost (assignment_cost.h: acyclic, mapped onto the devices from
// scratch, critical path) if it is no higher than the current cost (ties: the last pair tried,
// as in torch); repeat until no pair qualifies.
// torch starts from one partition per node, which costs O(N^3) cost evaluations. cleave runs the
// same search from two starting points and keeps the lower critical path (ties: the first):
//   1. one partition per node, when the graph has at most kSingleNodeSearchLimit callable nodes
//      (torch's exact procedure, for models the size of PyTorch's tests: its test model gives
//      torch's partitions and critical path 160);
//   2. the optimal contiguous cut (optimal.h, critical_path objective), or size_based's
//      partitions when no contiguous cut fits: few partitions, so the search is cheap at any size.
// Guarantees: every callable node in one partition; the partitions acyclic and mapped within
// memory; a critical path no higher than either starting point's.
// Complexity: start 2 is O(N x W x (deg + D)) plus O(P^3) evaluations of O(V + E + D x V) for
// its P (<= devices) partitions; start 1 adds O(N^3) evaluations on small graphs.
#pragma once

#include "partition/latency.h"
#include "partition/size_based.h"

namespace cleave::partition {

inline constexpr std::size_t kSingleNodeSearchLimit = 24;

[[nodiscard]] Expected<PartitionResult> partitionCostAware(const ir::Graph& graph, const DeviceSet& devices,
                                                           const IdVector<ir::NodeId, NodeLatency>& latencies,
                                                           const TransferRates& rates);

} // namespace cleave::partition
