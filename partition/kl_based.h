// partition/kl_based.h - torch's kl_based_partition (Kernighan-Lin moves), fixed and repeated.
//
// Starts from size_based's partitions and their devices. For each callable node in topological
// order, tries moving it to every other partition, alone or in exchange for one node of that
// partition, and applies the move with the lowest cost (assignment_cost.h) if it is strictly
// lower than the current one. torch's swap_node_to_partition reports the cost of the *last*
// candidate it tried, not the best one, and re-applies a stale pair on later nodes; cleave keeps
// the best candidate and its partitions. Passes repeat while one improves (at most kMaxKlPasses).
// Only boundary nodes move or are exchanged (a node with every producer and user in its own
// partition cannot leave it without a cycle or extra transfers); torch tries every node.
// Guarantees: the critical path never exceeds size_based's; each partition fits its devices.
// Complexity: per pass O(B x P x B_p) evaluations of O(V + E + D x V), B boundary nodes, B_p
// boundary nodes per partition.
#pragma once

#include "partition/latency.h"
#include "partition/size_based.h"

namespace cleave::partition {

inline constexpr int kMaxKlPasses = 8;

[[nodiscard]] Expected<PartitionResult> partitionKlBased(const ir::Graph& graph, const DeviceSet& devices,
                                                         const IdVector<ir::NodeId, NodeLatency>& latencies,
                                                         const TransferRates& rates);

} // namespace cleave::partition
