#include "partition/device_mapping.h"

#include <algorithm>
#include <numeric>

namespace cleave::partition {
using ir::NodeId;

MappedPartition makePartition(const ir::Graph& graph, const IdVector<NodeId, NodeSize>& sizes,
                              std::vector<NodeId> nodes, IdVector<NodeId, std::uint8_t>& scratch) {
  MappedPartition partition;
  for (NodeId node : nodes)
    partition.usedBytes += addToPartition(graph, sizes, node, partition.members, scratch);
  for (NodeId member : partition.members)
    scratch[member] = 0;
  partition.nodes = std::move(nodes);
  return partition;
}

DeviceMapper::DeviceMapper(const ir::Graph& graph, const IdVector<NodeId, NodeSize>& sizes, const DeviceSet& devices,
                           const DeviceSupport* support)
    : graph_(graph), sizes_(sizes), devices_(devices), support_(support),
      held_(devices.devices.size(), IdVector<NodeId, std::uint8_t>(graph.numNodes(), 0)),
      heldList_(devices.devices.size()) {}

std::optional<std::size_t> DeviceMapper::map(std::vector<MappedPartition>& partitions) {
  std::size_t count = devices_.devices.size();
  for (std::size_t d = 0; d < count; ++d) {
    for (NodeId node : heldList_[d])
      held_[d][node] = 0;
    heldList_[d].clear();
  }
  std::vector<std::int64_t> left(count);
  for (std::size_t d = 0; d < count; ++d)
    left[d] = devices_.devices[d].availableMemBytes;
  auto hold = [&](std::size_t d, const MappedPartition& partition) {
    for (NodeId member : partition.members)
      if (!held_[d][member]) {
        held_[d][member] = 1;
        heldList_[d].push_back(member);
      }
  };
  for (const MappedPartition& partition : partitions)
    for (std::int64_t id : partition.deviceIds)
      if (std::size_t d = devices_.indexOf(id); d < count) {
        left[d] -= partition.usedBytes;
        hold(d, partition);
      }
  std::vector<std::size_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  for (std::size_t p = 0; p < partitions.size(); ++p) {
    MappedPartition& partition = partitions[p];
    if (!partition.deviceIds.empty())
      continue;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return left[a] < left[b]; });
    bool placed = false;
    for (std::size_t d : order) {
      if (support_) {
        bool runsAll = true;
        for (NodeId node : partition.nodes)
          runsAll = runsAll && support_->allows(node, d);
        if (!runsAll)
          continue;
      }
      std::int64_t needed = partition.usedBytes;
      if (!heldList_[d].empty()) { // inputs the device's partitions already hold are not needed again
        std::vector<NodeId> added;
        for (NodeId member : partition.members)
          if (!held_[d][member]) {
            held_[d][member] = 1;
            added.push_back(member);
          }
        needed = 0;
        for (NodeId member : partition.members)
          needed += extraSizeOf(graph_, sizes_, member, held_[d]);
        for (NodeId member : added)
          held_[d][member] = 0;
      }
      if (needed < left[d]) {
        partition.deviceIds.push_back(devices_.devices[d].logicalId);
        left[d] -= needed;
        hold(d, partition);
        placed = true;
        break;
      }
    }
    if (!placed)
      return p;
  }
  return std::nullopt;
}

} // namespace cleave::partition
