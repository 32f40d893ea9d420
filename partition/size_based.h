// partition/size_based.h - memory-driven partitioning with torch's Partitioner semantics.
//
// partitionBySize follows Partitioner.partition_graph for PartitionMode.size_based:
//   - the whole graph (every node's total size) fits the largest device: one partition on it
//     (the first such device);
//   - it exceeds all devices together: DoesNotFit;
//   - otherwise the greedy fill of size_based_partition: walk callable nodes in order; the first
//     node of a partition claims the first unoccupied device that holds it; a node that no longer
//     fits opens a new partition on the next such device; once every device holds a partition,
//     each further node gets a partition of its own, and those are mapped to the device with the
//     least memory left that still has room (get_device_to_partitions_mapping: strictly less than
//     what is left).
// Partitions hold callable nodes; graph inputs and constants they read count in their memory.
// Guarantees: every callable node in one partition; each partition's bytes fit its device; the
// partition order is topological. Complexity: O(V + E) for the fill, O(P x D x partition edges)
// for mapping single-node partitions.
// With support profiles (heterogeneous devices) the whole-model device must run every node, a
// partition's device must run each node added to it (else the node opens a new partition), and
// mapping skips devices that do not run a partition's nodes.
// Fails: DoesNotFit naming the node that fits no device, or the bytes missing overall.
#pragma once

#include <optional>

#include "partition/device_mapping.h"

#include "partition/partition_result.h"

namespace cleave::partition {


// The devices' support masks when any device has a profile (nullopt when none has). Fails:
// InvalidArgument (no devices), DoesNotFit (a node no device supports).
[[nodiscard]] Expected<std::optional<DeviceSupport>> supportOf(const ir::Graph& graph, const DeviceSet& devices);

[[nodiscard]] Expected<PartitionResult> partitionBySize(const ir::Graph& graph, const DeviceSet& devices);

// torch's checks before any mode runs: the whole model on the largest device (a result), more
// than all devices hold (DoesNotFit, by how many bytes), or neither (nullopt: a mode must cut it).
[[nodiscard]] Expected<std::optional<PartitionResult>> placeWholeModel(const ir::Graph& graph,
                                                                       const DeviceSet& devices);

} // namespace cleave::partition
