#include "partition/size_based.h"

#include <algorithm>
#include <numeric>

namespace cleave::partition {
using ir::NodeId;

namespace {

using Building = MappedPartition;

class SizeBasedPartitioner {
public:
  SizeBasedPartitioner(const ir::Graph& graph, const DeviceSet& devices, const DeviceSupport* support)
      : graph_(graph), set_(devices), devices_(devices.devices), support_(support), sizes_(computeNodeSizes(graph)),
        member_(graph.numNodes(), 0) {}

  Expected<PartitionResult> run();
  Expected<std::optional<PartitionResult>> placeWhole(); // the checks torch runs before any mode

private:
  Expected<std::size_t> findDeviceFor(NodeId node, std::vector<std::uint8_t>& occupied);
  void add(Building& partition, NodeId node);
  Status mapUnplacedPartitions();
  PartitionResult finish(bool single);

  const ir::Graph& graph_;
  const DeviceSet& set_;
  const std::vector<Device>& devices_;
  const DeviceSupport* support_; // null: every device runs every node
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
    if (!occupied[d] && devices_[d].availableMemBytes >= needed && (!support_ || support_->allows(node, d))) {
      occupied[d] = 1;
      return d;
    }
  return Error(ErrorCode::DoesNotFit) << "node '" << graph_.name(node) << "' (" << graph_.target(node)
                                      << ") needs " << needed << " bytes; no free device holds it";
}

Status SizeBasedPartitioner::mapUnplacedPartitions() {
  DeviceMapper mapper(graph_, sizes_, set_, support_);
  if (std::optional<std::size_t> p = mapper.map(partitions_))
    return Error(ErrorCode::DoesNotFit) << "partition " << *p << " (" << partitions_[*p].usedBytes
                                        << " bytes, first node '" << graph_.name(partitions_[*p].nodes.front())
                                        << "') fits no device's remaining memory";
  return {};
}

PartitionResult SizeBasedPartitioner::finish(bool single) {
  PartitionResult result = startPartitionResult(graph_);
  result.singlePartition = single;
  for (std::size_t p = 0; p < partitions_.size(); ++p)
    appendPartition(result, p, partitions_[p].nodes, partitions_[p].deviceIds, partitions_[p].usedBytes);
  finishPartitionResult(graph_, result);
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
  // The largest device that runs every node (with support profiles, not every device does).
  std::size_t largest = devices_.size();
  std::int64_t capacity = 0;
  for (std::size_t d = 0; d < devices_.size(); ++d) {
    capacity += devices_[d].availableMemBytes;
    bool runsAll = true;
    if (support_)
      for (NodeId node : callable)
        runsAll = runsAll && support_->allows(node, d);
    if (runsAll && (largest == devices_.size() || devices_[d].availableMemBytes > devices_[largest].availableMemBytes))
      largest = d;
  }
  if (largest < devices_.size() && total <= devices_[largest].availableMemBytes) {
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
    } else if (left.back() < extra ||
               (support_ && !support_->allows(node, set_.indexOf(partition->deviceIds.front())))) {
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

Expected<std::optional<DeviceSupport>> supportOf(const ir::Graph& graph, const DeviceSet& devices) {
  if (devices.devices.empty())
    return Error(ErrorCode::InvalidArgument) << "no devices";
  if (!devices.heterogeneous())
    return std::optional<DeviceSupport>();
  CLEAVE_TRY(DeviceSupport support, computeDeviceSupport(graph, devices));
  return std::optional<DeviceSupport>(std::move(support));
}

Expected<std::optional<PartitionResult>> placeWholeModel(const ir::Graph& graph, const DeviceSet& devices) {
  CLEAVE_TRY(std::optional<DeviceSupport> support, supportOf(graph, devices));
  return SizeBasedPartitioner(graph, devices, support ? &*support : nullptr).placeWhole();
}

Expected<PartitionResult> partitionBySize(const ir::Graph& graph, const DeviceSet& devices) {
  CLEAVE_TRY(std::optional<DeviceSupport> support, supportOf(graph, devices));
  return SizeBasedPartitioner(graph, devices, support ? &*support : nullptr).run();
}

} // namespace cleave::partition
