// partition/device_mapping.h - partitions onto devices, torch's get_device_to_partitions_mapping.
//
// Partitions that already name devices keep them and use those devices' memory. Each other
// partition, in list order, goes to the first device, in ascending order of memory left (stable:
// ties keep the previous order), that runs all its nodes (DeviceSupport) and has strictly more
// memory left than the partition needs there: its members' sizes, where inputs already held by
// the device's partitions are not counted again.
// Complexity: O(D x (V + E)) time and O(D x V) bytes of flags for one mapping.
#pragma once

#include <optional>

#include "partition/devices.h"
#include "partition/memory_model.h"

namespace cleave::partition {

// A partition with its memory: callable nodes (topological), members (the nodes plus the graph
// inputs and constants they read), bytes, and logical devices (empty until mapped).
struct MappedPartition {
  std::vector<ir::NodeId> nodes;
  std::vector<ir::NodeId> members;
  std::int64_t usedBytes = 0;
  std::vector<std::int64_t> deviceIds;
};

// Builds a partition's members and bytes from its callable nodes (in topological order).
MappedPartition makePartition(const ir::Graph& graph, const IdVector<ir::NodeId, NodeSize>& sizes,
                              std::vector<ir::NodeId> nodes, IdVector<ir::NodeId, std::uint8_t>& scratch);

class DeviceMapper {
public:
  DeviceMapper(const ir::Graph& graph, const IdVector<ir::NodeId, NodeSize>& sizes, const DeviceSet& devices,
               const DeviceSupport* support);
  // Maps every partition without devices. Returns the index of the first one that fits no
  // device (and stops there), or nullopt when all are placed.
  std::optional<std::size_t> map(std::vector<MappedPartition>& partitions);

private:
  const ir::Graph& graph_;
  const IdVector<ir::NodeId, NodeSize>& sizes_;
  const DeviceSet& devices_;
  const DeviceSupport* support_;
  std::vector<IdVector<ir::NodeId, std::uint8_t>> held_; // per device: members of its partitions
  std::vector<std::vector<ir::NodeId>> heldList_;         // the same, to clear
};

} // namespace cleave::partition
