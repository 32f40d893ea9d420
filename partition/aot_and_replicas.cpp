#include "partition/aot_and_replicas.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>

#include "base/json.h"

namespace cleave::partition {
using ir::NodeId;

namespace {
using nlohmann::json;
using DevicesOfPartition = std::map<std::int64_t, std::vector<std::int64_t>>;
using MembersOfPartition = std::map<std::int64_t, std::vector<NodeId>>;

// partition_to_logical_devices: each partition id with a non-empty list of known device ids.
Expected<DevicesOfPartition> readDeviceLists(const json& doc, const DeviceSet& devices, const std::string& sourceName) {
  std::set<std::int64_t> knownIds;
  for (const Device& device : devices.devices)
    knownIds.insert(device.logicalId);
  DevicesOfPartition devicesOf;
  for (const auto& [key, ids] : doc["partition_to_logical_devices"].items()) {
    char* end = nullptr;
    long long id = std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || !ids.is_array() || ids.empty())
      return Error(ErrorCode::ParseError) << sourceName << ": partition '" << key
                                          << "' needs a non-empty list of logical device ids";
    for (const json& value : ids) {
      if (!value.is_number_integer() || !knownIds.count(value.get<std::int64_t>()))
        return Error(ErrorCode::InvalidArgument) << sourceName << ": partition " << key << " names unknown logical device "
                                                 << toJsonText(value);
      devicesOf[id].push_back(value.get<std::int64_t>());
    }
  }
  return devicesOf;
}

// node_to_partition: every callable node of the graph in a partition that has devices; returns
// each partition's members in node order.
Expected<MembersOfPartition> readNodePartitions(const ir::Graph& graph, const json& doc,
                                                const DevicesOfPartition& devicesOf, const std::string& sourceName) {
  IdVector<NodeId, std::int64_t> partitionOf(graph.numNodes(), -1);
  for (const auto& [name, value] : doc["node_to_partition"].items()) {
    NodeId node = graph.findNode(name);
    if (node == NodeId{UINT32_MAX})
      return Error(ErrorCode::NotFound) << sourceName << ": node '" << name << "' is not in the model";
    if (!value.is_number_integer())
      return Error(ErrorCode::ParseError) << sourceName << ": node '" << name << "' needs an integer partition id";
    if (!graph.isCallable(node))
      continue;
    if (!devicesOf.count(value.get<std::int64_t>()))
      return Error(ErrorCode::InvalidArgument) << sourceName << ": partition " << value.get<std::int64_t>()
                                               << " of node '" << name << "' has no logical devices";
    partitionOf[node] = value.get<std::int64_t>();
  }
  MembersOfPartition members;
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    if (!graph.isCallable(node))
      continue;
    if (partitionOf[node] < 0)
      return Error(ErrorCode::InvalidArgument) << sourceName << ": node '" << graph.name(node) << "' has no partition";
    members[partitionOf[node]].push_back(node);
  }
  return members;
}

// The partition ids in an order where data flows forward (Kahn, ties by partition id); a cycle
// is an error naming a partition on it. O(V + E log P).
Expected<std::vector<std::int64_t>> orderPartitions(const ir::Graph& graph, const MembersOfPartition& members,
                                                    const std::string& sourceName) {
  std::vector<std::int64_t> ids;
  IdVector<NodeId, std::uint32_t> slotOf(graph.numNodes(), 0);
  for (const auto& [id, nodes] : members) {
    for (NodeId node : nodes)
      slotOf[node] = static_cast<std::uint32_t>(ids.size());
    ids.push_back(id);
  }
  std::vector<std::set<std::uint32_t>> children(ids.size());
  std::vector<std::uint32_t> indegree(ids.size(), 0);
  for (const auto& [id, nodes] : members)
    for (NodeId node : nodes)
      for (ir::ValueId value : graph.inputs(node)) {
        if (value == ir::kNoValue || !graph.isCallable(graph.producer(value)))
          continue;
        std::uint32_t from = slotOf[graph.producer(value)], to = slotOf[node];
        if (from != to && children[from].insert(to).second)
          ++indegree[to];
      }
  std::priority_queue<std::uint32_t, std::vector<std::uint32_t>, std::greater<>> ready;
  for (std::uint32_t s = 0; s < ids.size(); ++s)
    if (indegree[s] == 0)
      ready.push(s);
  std::vector<std::int64_t> order;
  while (!ready.empty()) {
    std::uint32_t s = ready.top();
    ready.pop();
    order.push_back(ids[s]);
    for (std::uint32_t c : children[s])
      if (--indegree[c] == 0)
        ready.push(c);
  }
  if (order.size() != ids.size()) {
    std::uint32_t stuck = 0;
    while (indegree[stuck] == 0)
      ++stuck;
    return Error(ErrorCode::InvalidGraph) << sourceName << ": partitions depend on each other in a cycle (partition "
                                          << ids[stuck] << " is on it)";
  }
  return order;
}

Expected<PartitionResult> aheadOfTimeFromDocument(const ir::Graph& graph, const DeviceSet& devices, const json& doc,
                                                  const std::string& sourceName) {
  if (!doc.is_object() || !doc.contains("node_to_partition") || !doc["node_to_partition"].is_object() ||
      !doc.contains("partition_to_logical_devices") || !doc["partition_to_logical_devices"].is_object())
    return Error(ErrorCode::ParseError) << sourceName
                                        << ": expected {\"node_to_partition\": {...}, \"partition_to_logical_devices\": {...}}";
  CLEAVE_TRY(DevicesOfPartition devicesOf, readDeviceLists(doc, devices, sourceName));
  CLEAVE_TRY(MembersOfPartition members, readNodePartitions(graph, doc, devicesOf, sourceName));
  CLEAVE_TRY(std::vector<std::int64_t> order, orderPartitions(graph, members, sourceName));
  IdVector<NodeId, NodeSize> sizes = computeNodeSizes(graph);
  IdVector<NodeId, std::uint8_t> in(graph.numNodes(), 0);
  PartitionResult result = startPartitionResult(graph);
  for (std::int64_t id : order) {
    std::vector<NodeId> all = members[id];
    for (NodeId node : members[id])
      for (NodeId input : inputNodesOf(graph, node))
        if (!graph.isCallable(input) && std::find(all.begin(), all.end(), input) == all.end())
          all.push_back(input);
    std::int64_t bytes = memoryOfMembers(graph, sizes, all, in);
    appendPartition(result, id, members[id], devicesOf[id], bytes);
  }
  finishPartitionResult(graph, result);
  return result;
}
} // namespace

Expected<PartitionResult> partitionAheadOfTime(const ir::Graph& graph, const DeviceSet& devices,
                                               std::string_view mappingJson, const std::string& sourceName) {
  CLEAVE_TRY(nlohmann::json doc, parseJsonInput(mappingJson, sourceName));
  return guardJson(sourceName, [&]() { return aheadOfTimeFromDocument(graph, devices, doc, sourceName); });
}

PartitionResult saturateHost(const DeviceSet& devices, PartitionResult result) {
  const std::vector<Device>& list = devices.devices;
  std::vector<std::int64_t> left(list.size());
  std::vector<std::vector<std::size_t>> onDevice(list.size());
  for (std::size_t d = 0; d < list.size(); ++d)
    left[d] = list[d].availableMemBytes;
  for (std::size_t p = 0; p < result.partitions.size(); ++p)
    for (std::int64_t id : result.partitions[p].logicalDeviceIds)
      for (std::size_t d = 0; d < list.size(); ++d)
        if (list[d].logicalId == id) {
          onDevice[d].push_back(p);
          left[d] -= result.partitions[p].usedMemBytes;
        }
  std::vector<std::size_t> used;
  for (std::size_t d = 0; d < list.size(); ++d)
    if (!onDevice[d].empty())
      used.push_back(d);
  std::vector<std::pair<std::size_t, std::size_t>> replicas; // (replica, original), in order found
  std::vector<std::uint8_t> taken(list.size(), 0);
  for (std::size_t d : used)
    taken[d] = 1;
  while (used.size() * 2 + replicas.size() <= list.size()) {
    std::vector<std::uint8_t> roundTaken = taken;
    std::vector<std::pair<std::size_t, std::size_t>> round;
    bool success = true;
    for (std::size_t original : used) {
      std::int64_t needed = list[original].availableMemBytes - left[original];
      std::size_t best = list.size();
      for (std::size_t d = 0; d < list.size(); ++d)
        if (!roundTaken[d] && list[d].availableMemBytes >= needed &&
            (best == list.size() || list[d].availableMemBytes < list[best].availableMemBytes))
          best = d;
      if (best == list.size()) {
        success = false;
        break;
      }
      roundTaken[best] = 1;
      round.emplace_back(best, original);
    }
    if (!success)
      break;
    taken = roundTaken;
    replicas.insert(replicas.end(), round.begin(), round.end());
  }
  for (const auto& [replica, original] : replicas)
    for (std::size_t p : onDevice[original])
      result.partitions[p].logicalDeviceIds.push_back(list[replica].logicalId);
  return result;
}

} // namespace cleave::partition
