// partition/aot_and_replicas.h - partitions given ahead of time, and replicas on idle devices.
//
// partitionAheadOfTime (torch's aot_based_partition): the file names each callable node's
// partition and each partition's logical devices:
//   {"node_to_partition": {"add_1": 0, "linear": 1, ...},
//    "partition_to_logical_devices": {"0": [0], "1": [1]}}
// Entries for inputs and constants are accepted and ignored. Partitions are ordered so their
// graph runs forward (ties: the lower partition id); memory follows the memory model.
// Fails: NotFound (a node the model lacks), InvalidArgument (a callable node without a
// partition, a partition without devices, an unknown logical id), InvalidGraph (the partitions
// depend on each other in a cycle, naming one).
//
// saturateHost (torch's saturate_host): while twice the used devices plus the replicas fit in the
// device list, every used device gets a replica: the smallest idle device with room for all its
// partitions (ties: the first in the list); a round that cannot place one replica adds none.
// Each partition then lists its replicas' logical ids after its own.
// Complexity: O(V + E) for the AOT partitions; O(rounds x D^2) for the replicas.
#pragma once

#include "partition/size_based.h"

namespace cleave::partition {

[[nodiscard]] Expected<PartitionResult> partitionAheadOfTime(const ir::Graph& graph, const DeviceSet& devices,
                                                             std::string_view mappingJson,
                                                             const std::string& sourceName);

// Returns `result` with the replicas' logical ids appended to its partitions.
[[nodiscard]] PartitionResult saturateHost(const DeviceSet& devices, PartitionResult result);

} // namespace cleave::partition
