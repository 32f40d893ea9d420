// partition/optimal.h - the best contiguous partitioning, by dynamic programming.
//
// The callable nodes in topological (id) order are cut into segments; segment k runs on a device
// of its own, devices taken in file order (some may be skipped). A segment must fit its device
// (the memory model's bytes, inputs from outside counted) and, with support profiles, hold only
// nodes the device runs. Among all such cuts the DP finds one that minimizes
//   critical_path: the sum of segment latencies (the longest node path inside each segment) plus
//                  each cut's transfer (bytes of the values crossing it / the rate between the
//                  two devices). For a chain this is the partition graph's critical path; for
//                  other graphs it is the cost of the path through every segment, an upper bound
//                  of the critical path when no value skips a segment;
//   bottleneck:    the largest segment latency or cut transfer time (pipelined throughput).
// Ties go to the first-found cut (shorter last segments). The reported critical path is then
// computed exactly (latency.h).
// Complexity: O(N x W x (deg + D) + N x D^2) time, O(N x D) memory, where W is the longest run of
// callable nodes whose own sizes fit the largest device.
// Fails: DoesNotFit when no contiguous cut fits the devices (size_based may still find one: it
// shares devices between partitions).
#pragma once

#include "partition/latency.h"
#include "partition/size_based.h"

namespace cleave::partition {

enum class Objective : std::uint8_t { CriticalPath, Bottleneck };

[[nodiscard]] Expected<PartitionResult> partitionOptimal(const ir::Graph& graph, const DeviceSet& devices,
                                                         const IdVector<ir::NodeId, NodeLatency>& latencies,
                                                         const TransferRates& rates, Objective objective);

} // namespace cleave::partition
