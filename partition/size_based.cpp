#include "partition/size_based.h"

#include <algorithm>
#include <numeric>

namespace cleave::partition {
using ir::NodeId;

namespace {

// A partition under construction: its callable nodes and the member flags used for memory
// (callable nodes plus the graph inputs and constants they read).
struct Building {
  std::vector<NodeId> nodes;
  std::vector<NodeId> members; // nodes + read inputs/constants, each once
  std::vector<std::int64_t> deviceIds;
  std::int64_t usedBytes = 0;
};

class SizeBasedPartitioner {
public:
  SizeBasedPartitioner(const ir::Graph& graph, const DeviceSet& devices)
      : graph_(graph), devices_(devices.devices), sizes_(computeNodeSizes(graph)),
        member_(graph.numNodes(), 0) {}

  Expected<PartitionResult> run();
  Expected<std::optional<PartitionResult>> placeWhole(); // the checks torch runs before any mode

private:
  Expected<std::size_t> findDeviceFor(NodeId node, std::vector<std::uint8_t>& occupied);
  void add(Building& partition, NodeId node);
  Status mapUnplacedPartitions();
  PartitionResult finish(bool single);

  const ir::Graph& graph_;
  const std::vector<Device>& devices_;
  IdVector<NodeId, NodeSize> sizes_;
  std::vector<Building> partitions_;
  IdVector<NodeId, std::uint8_t> member_; // scratch: members of the partition being filled
};

void SizeBasedPartitioner::add(Building& partition, NodeId node) {
  partition.usedBytes += addToPartition(graph_, sizes_, node, partition.members, member_);
  partition.nodes.push_back(node);
}

Expected<std::size_t> SizeBasedPartitioner::findDeviceFor(NodeId node, std::vector<std::uint8_t>& occupied) {
  IdVector<NodeId, std::uint8_t> none(graph_.numNodes(), 0);
  std::int64_t needed = extraSizeOf(graph_, sizes_, node, none);
  for (std::size_t d = 0; d < devices_.size(); ++d)
    if (!occupied[d] && devices_[d].availableMemBytes >= needed) {
      occupied[d] = 1;
      return d;
    }
  return Error(ErrorCode::DoesNotFit) << "node '" << graph_.name(node) << "' (" << graph_.target(node)
                                      << ") needs " << needed << " bytes; no free device holds it";
}

Status SizeBasedPartitioner::mapUnplacedPartitions() {
  std::vector<std::int64_t> left(devices_.size());
  std::vector<std::vector<std::size_t>> onDevice(devices_.size());
  for (std::size_t d = 0; d < devices_.size(); ++d)
    left[d] = devices_[d].availableMemBytes;
  for (std::size_t p = 0; p < partitions_.size(); ++p)
    for (std::int64_t id : partitions_[p].deviceIds)
      for (std::size_t d = 0; d < devices_.size(); ++d)
        if (devices_[d].logicalId == id) {
          onDevice[d].push_back(p);
          left[d] -= partitions_[p].usedBytes;
        }
  IdVector<NodeId, std::uint8_t> in(graph_.numNodes(), 0);
  for (std::size_t p = 0; p < partitions_.size(); ++p) {
    Building& partition = partitions_[p];
    if (!partition.deviceIds.empty())
      continue;
    std::vector<std::size_t> order(devices_.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return left[a] < left[b]; });
    bool placed = false;
    for (std::size_t d : order) {
      std::int64_t needed = partition.usedBytes;
      if (!onDevice[d].empty()) { // what the device's partitions already hold is not needed again
        for (std::size_t q : onDevice[d])
          for (NodeId node : partitions_[q].members)
            in[node] = 1;
        for (NodeId node : partition.members)
          in[node] = 1;
        needed = 0;
        for (NodeId node : partition.members)
          needed += extraSizeOf(graph_, sizes_, node, in);
        for (std::size_t q : onDevice[d])
          for (NodeId node : partitions_[q].members)
            in[node] = 0;
        for (NodeId node : partition.members)
          in[node] = 0;
      }
      if (needed < left[d]) {
        onDevice[d].push_back(p);
        partition.deviceIds.push_back(devices_[d].logicalId);
        left[d] -= needed;
        placed = true;
        break;
      }
    }
    if (!placed)
      return Error(ErrorCode::DoesNotFit) << "partition " << p << " (" << partition.usedBytes
                                          << " bytes, first node '" << graph_.name(partition.nodes.front())
                                          << "') fits no device's remaining memory";
  }
  return {};
}

PartitionResult SizeBasedPartitioner::finish(bool single) {
  PartitionResult result;
  result.singlePartition = single;
  result.plan.kind = plan::PlanKind::Partition;
  result.plan.placement = IdVector<NodeId, plan::Placement>(graph_.numNodes(), plan::Placement::NotPlaced);
  result.plan.detail = IdVector<NodeId, std::string>(graph_.numNodes());
  for (std::size_t p = 0; p < partitions_.size(); ++p) {
    plan::Submodule submodule;
    submodule.name = "partition_" + std::to_string(p);
    submodule.nodes = partitions_[p].nodes;
    std::sort(submodule.nodes.begin(), submodule.nodes.end());
    result.plan.submodules.push_back(std::move(submodule));
    result.partitions.push_back({partitions_[p].deviceIds, partitions_[p].usedBytes});
  }
  plan::indexSubmodules(graph_, result.plan);
  return result;
}

Expected<std::optional<PartitionResult>> SizeBasedPartitioner::placeWhole() {
  std::int64_t total = 0;
  std::vector<NodeId> callable;
  for (std::uint32_t n = 0; n < graph_.numNodes(); ++n) {
    NodeId node{n};
    if (graph_.kind(node) == ir::NodeKind::Output)
      continue;
    total += sizes_[node].totalBytes;
    if (graph_.isCallable(node))
      callable.push_back(node);
  }
  if (callable.empty())
    return Error(ErrorCode::InvalidArgument) << "no partition: the model has no operations";
  std::size_t largest = 0;
  std::int64_t capacity = 0;
  for (std::size_t d = 0; d < devices_.size(); ++d) {
    capacity += devices_[d].availableMemBytes;
    if (devices_[d].availableMemBytes > devices_[largest].availableMemBytes)
      largest = d;
  }
  if (total <= devices_[largest].availableMemBytes) {
    Building whole;
    whole.nodes = callable;
    whole.usedBytes = total;
    whole.deviceIds = {devices_[largest].logicalId};
    partitions_.push_back(std::move(whole));
    return std::optional<PartitionResult>(finish(true));
  }
  if (total > capacity)
    return Error(ErrorCode::DoesNotFit) << "the model needs " << total << " bytes, the devices have "
                                        << capacity << " together (" << total - capacity << " short)";
  return std::optional<PartitionResult>();
}

Expected<PartitionResult> SizeBasedPartitioner::run() {
  CLEAVE_TRY(std::optional<PartitionResult> whole, placeWhole());
  if (whole)
    return std::move(*whole);
  std::vector<NodeId> callable;
  for (std::uint32_t n = 0; n < graph_.numNodes(); ++n)
    if (graph_.isCallable(NodeId{n}))
      callable.push_back(NodeId{n});

  std::vector<std::uint8_t> occupied(devices_.size(), 0);
  std::vector<std::int64_t> left;
  partitions_.emplace_back();
  left.push_back(0);
  for (NodeId node : callable) {
    if (partitions_.size() > devices_.size()) { // every device has a partition: one per node
      Building single;
      for (NodeId m : partitions_.back().members)
        member_[m] = 0;
      partitions_.push_back(std::move(single));
      add(partitions_.back(), node);
      continue;
    }
    Building* partition = &partitions_.back();
    std::int64_t extra = extraSizeOf(graph_, sizes_, node, member_);
    if (partition->usedBytes == 0) {
      CLEAVE_TRY(std::size_t device, findDeviceFor(node, occupied));
      left.back() = devices_[device].availableMemBytes;
      partition->deviceIds.push_back(devices_[device].logicalId);
    } else if (left.back() < extra) {
      for (NodeId m : partition->members)
        member_[m] = 0;
      if (partitions_.size() == devices_.size()) { // no device left: a partition of its own
        partitions_.emplace_back();
        add(partitions_.back(), node);
        continue;
      }
      CLEAVE_TRY(std::size_t device, findDeviceFor(node, occupied));
      partitions_.emplace_back();
      left.push_back(devices_[device].availableMemBytes);
      partition = &partitions_.back();
      partition->deviceIds.push_back(devices_[device].logicalId);
      extra = extraSizeOf(graph_, sizes_, node, member_);
    }
    add(*partition, node);
    left.back() -= extra;
  }
  CLEAVE_CHECK(mapUnplacedPartitions());
  return finish(false);
}

} // namespace

Expected<std::optional<PartitionResult>> placeWholeModel(const ir::Graph& graph, const DeviceSet& devices) {
  if (devices.devices.empty())
    return Error(ErrorCode::InvalidArgument) << "no devices";
  return SizeBasedPartitioner(graph, devices).placeWhole();
}

Expected<PartitionResult> partitionBySize(const ir::Graph& graph, const DeviceSet& devices) {
  if (devices.devices.empty())
    return Error(ErrorCode::InvalidArgument) << "no devices";
  return SizeBasedPartitioner(graph, devices).run();
}

} // namespace cleave::partition
