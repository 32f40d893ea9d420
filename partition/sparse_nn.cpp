#include "partition/sparse_nn.h"

#include <algorithm>
#include <queue>

namespace cleave::partition {
using ir::NodeId;

bool isEmbeddingNode(const ir::Graph& graph, NodeId node) {
  if (const ir::Attribute* flag = graph.findAttribute(node, "embedding"); flag && flag->intValue)
    return true;
  std::string_view op = graph.opType(node);
  if (graph.modelInfo().format == ir::SourceFormat::Fx || (op != "Gather" && op != "Loop"))
    return false;
  auto inputs = graph.inputs(node);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == ir::kNoValue || (op == "Gather" && i != 0))
      continue;
    NodeId producer = graph.producer(inputs[i]);
    if (graph.kind(producer) == ir::NodeKind::Parameter && graph.dims(inputs[i]).size() == 2)
      return true; // an embedding table: Gather's data, or a table an EmbeddingBag Loop reads
  }
  return false;
}

namespace {

struct SparsePartition {
  std::vector<NodeId> callable, members; // members: callable nodes + the inputs/constants they read
  std::int64_t usedBytes = 0;
  std::vector<std::int64_t> deviceIds;
};

class SparseNnPartitioner {
public:
  SparseNnPartitioner(const ir::Graph& graph, const DeviceSet& devices)
      : graph_(graph), devices_(devices.devices), sizes_(computeNodeSizes(graph)), flags_(graph.numNodes(), 0) {}

  Expected<PartitionResult> run();

private:
  std::size_t create() {
    store_.emplace_back();
    order_.push_back(store_.size() - 1);
    return store_.size() - 1;
  }
  void add(std::size_t p, NodeId node);
  std::vector<std::uint32_t> bfsLevels(); // by position in order_
  Status combineBySize(std::vector<std::size_t>& list);
  // Phase 1: sweep the callable nodes in order, a new partition at every switch between
  // embedding and dense nodes and whenever the current one is full.
  Status formPartitions(std::vector<std::size_t>& embedding, std::vector<std::size_t>& dense);
  // Phase 3: each embedding partition on its own device, the dense ones replicated on all of those.
  Status placeOnDevices(const std::vector<std::size_t>& embedding, const std::vector<std::size_t>& dense);
  // Phase 4: the partitions in an order whose data flows forward (Kahn, ties by list order).
  Expected<PartitionResult> orderedResult();

  const ir::Graph& graph_;
  const std::vector<Device>& devices_;
  IdVector<NodeId, NodeSize> sizes_;
  IdVector<NodeId, std::uint8_t> flags_; // scratch membership
  std::vector<SparsePartition> store_;
  std::vector<std::size_t> order_; // torch's self.partitions: store indices in list order
  std::int64_t available_ = 0;
};

void SparseNnPartitioner::add(std::size_t p, NodeId node) {
  SparsePartition& partition = store_[p];
  for (NodeId member : partition.members)
    flags_[member] = 1;
  partition.usedBytes += addToPartition(graph_, sizes_, node, partition.members, flags_);
  partition.callable.push_back(node);
  for (NodeId member : partition.members)
    flags_[member] = 0;
}

// torch's get_bfs_level_partition re-levels a partition each time it is reached, so a level is
// the longest path from a partition without parents.
std::vector<std::uint32_t> SparseNnPartitioner::bfsLevels() {
  std::size_t count = order_.size();
  IdVector<NodeId, std::uint32_t> holder(graph_.numNodes(), UINT32_MAX); // callable node -> position
  for (std::uint32_t i = 0; i < count; ++i)
    for (NodeId node : store_[order_[i]].callable)
      holder[node] = i;
  std::vector<std::vector<std::uint32_t>> children(count);
  std::vector<std::uint32_t> indegree(count, 0);
  for (std::uint32_t i = 0; i < count; ++i) {
    const SparsePartition& partition = store_[order_[i]];
    for (NodeId member : partition.members)
      flags_[member] = 1;
    for (NodeId member : partition.members)
      for (ir::ValueId value : graph_.outputs(member))
        for (NodeId user : graph_.users(value)) {
          std::uint32_t child = holder[user];
          if (child == UINT32_MAX || child == i)
            continue;
          // torch: not a child when the child also holds this member (a shared input)
          const std::vector<NodeId>& childMembers = store_[order_[child]].members;
          if (std::find(childMembers.begin(), childMembers.end(), member) != childMembers.end())
            continue;
          if (std::find(children[i].begin(), children[i].end(), child) == children[i].end()) {
            children[i].push_back(child);
            ++indegree[child];
          }
        }
    for (NodeId member : partition.members)
      flags_[member] = 0;
  }
  std::vector<std::uint32_t> level(count, 0);
  std::queue<std::uint32_t> ready;
  for (std::uint32_t i = 0; i < count; ++i)
    if (indegree[i] == 0)
      ready.push(i);
  while (!ready.empty()) {
    std::uint32_t i = ready.front();
    ready.pop();
    for (std::uint32_t child : children[i]) {
      level[child] = std::max(level[child], level[i] + 1);
      if (--indegree[child] == 0)
        ready.push(child);
    }
  }
  return level;
}

Status SparseNnPartitioner::combineBySize(std::vector<std::size_t>& list) {
  while (list.size() > 1) {
    std::vector<std::size_t> sorted = list;
    std::stable_sort(sorted.begin(), sorted.end(),
                     [&](std::size_t a, std::size_t b) { return store_[a].usedBytes < store_[b].usedBytes; });
    std::vector<std::uint32_t> levels = bfsLevels();
    auto levelOf = [&](std::size_t p) {
      return levels[std::find(order_.begin(), order_.end(), p) - order_.begin()];
    };
    std::size_t smallest = sorted.front();
    bool combined = false;
    for (std::size_t k = sorted.size(); k-- > 1;) {
      std::size_t other = sorted[k];
      std::int64_t gap = static_cast<std::int64_t>(levelOf(smallest)) - static_cast<std::int64_t>(levelOf(other));
      if (gap > 1 || gap < -1)
        continue;
      SparsePartition merged;
      merged.callable = store_[other].callable;
      merged.callable.insert(merged.callable.end(), store_[smallest].callable.begin(), store_[smallest].callable.end());
      merged.members = store_[other].members;
      for (NodeId member : store_[smallest].members)
        if (std::find(merged.members.begin(), merged.members.end(), member) == merged.members.end())
          merged.members.push_back(member);
      merged.usedBytes = memoryOfMembers(graph_, sizes_, merged.members, flags_);
      if (merged.usedBytes > available_)
        continue;
      // combine_two_partitions: the union joins the end of the list, the two leave it.
      store_.push_back(std::move(merged));
      std::size_t id = store_.size() - 1;
      order_.erase(std::remove_if(order_.begin(), order_.end(), [&](std::size_t p) { return p == other || p == smallest; }),
                   order_.end());
      order_.push_back(id);
      list.erase(std::remove_if(list.begin(), list.end(), [&](std::size_t p) { return p == other || p == smallest; }),
                 list.end());
      list.push_back(id);
      combined = true;
      break;
    }
    if (!combined)
      break;
  }
  return {};
}

Status SparseNnPartitioner::formPartitions(std::vector<std::size_t>& embedding, std::vector<std::size_t>& dense) {
  bool inEmbedding = false;
  std::size_t current = create();
  auto close = [&](bool startNew) {
    (inEmbedding ? embedding : dense).push_back(current);
    if (startNew)
      current = create();
  };
  IdVector<NodeId, std::uint8_t> none(graph_.numNodes(), 0);
  for (std::uint32_t n = 0; n < graph_.numNodes(); ++n) {
    NodeId node{n};
    if (!graph_.isCallable(node))
      continue;
    if (isEmbeddingNode(graph_, node) != inEmbedding) {
      if (store_[current].usedBytes != 0)
        close(true);
      inEmbedding = !inEmbedding;
    }
    for (NodeId member : store_[current].members)
      flags_[member] = 1;
    std::int64_t extra = extraSizeOf(graph_, sizes_, node, flags_);
    for (NodeId member : store_[current].members)
      flags_[member] = 0;
    if (extra + store_[current].usedBytes > available_) {
      close(true);
      if (extraSizeOf(graph_, sizes_, node, none) > available_)
        return Error(ErrorCode::DoesNotFit) << "node '" << graph_.name(node) << "' needs "
                                            << extraSizeOf(graph_, sizes_, node, none) << " bytes, a device has "
                                            << available_;
    }
    add(current, node);
  }
  close(false);
  return {};
}

Status SparseNnPartitioner::placeOnDevices(const std::vector<std::size_t>& embedding,
                                           const std::vector<std::size_t>& dense) {
  std::int64_t denseBytes = 0;
  for (std::size_t p : dense)
    denseBytes += store_[p].usedBytes;
  if (embedding.size() > devices_.size())
    return Error(ErrorCode::DoesNotFit) << "sparse_nn needs " << embedding.size() << " devices for the embedding partitions, "
                                        << devices_.size() << " given";
  std::vector<std::int64_t> occupied;
  for (std::size_t i = 0; i < embedding.size(); ++i) {
    SparsePartition& partition = store_[embedding[i]];
    if (denseBytes + partition.usedBytes > available_)
      return Error(ErrorCode::DoesNotFit) << "embedding partition with '" << graph_.name(partition.callable.front())
                                          << "' (" << partition.usedBytes << " bytes) and the non-embedding partitions ("
                                          << denseBytes << " bytes) do not fit one device (" << available_ << ")";
    partition.deviceIds = {devices_[i].logicalId};
    occupied.push_back(devices_[i].logicalId);
  }
  for (std::size_t p : dense)
    store_[p].deviceIds = occupied;
  return {};
}

Expected<PartitionResult> SparseNnPartitioner::orderedResult() {
  std::erase_if(order_, [&](std::size_t p) { return store_[p].callable.empty(); });
  std::size_t count = order_.size();
  IdVector<NodeId, std::uint32_t> position(graph_.numNodes(), UINT32_MAX);
  for (std::uint32_t i = 0; i < count; ++i)
    for (NodeId node : store_[order_[i]].callable)
      position[node] = i;
  std::vector<std::vector<std::uint32_t>> next(count);
  std::vector<std::uint32_t> indegree(count, 0);
  for (std::uint32_t n = 0; n < graph_.numNodes(); ++n)
    for (ir::ValueId value : graph_.inputs(NodeId{n})) {
      if (value == ir::kNoValue || position[NodeId{n}] == UINT32_MAX)
        continue;
      std::uint32_t from = position[graph_.producer(value)], to = position[NodeId{n}];
      if (from != UINT32_MAX && from != to && std::find(next[from].begin(), next[from].end(), to) == next[from].end()) {
        next[from].push_back(to);
        ++indegree[to];
      }
    }
  std::priority_queue<std::uint32_t, std::vector<std::uint32_t>, std::greater<>> ready;
  for (std::uint32_t i = 0; i < count; ++i)
    if (indegree[i] == 0)
      ready.push(i);
  PartitionResult result = startPartitionResult(graph_);
  while (!ready.empty()) {
    std::uint32_t i = ready.top();
    ready.pop();
    SparsePartition& partition = store_[order_[i]];
    appendPartition(result, i, partition.callable, partition.deviceIds, partition.usedBytes);
    for (std::uint32_t to : next[i])
      if (--indegree[to] == 0)
        ready.push(to);
  }
  if (result.plan.submodules.size() != count)
    return Error(ErrorCode::InvalidGraph) << "sparse_nn merged partitions that depend on each other in a cycle";
  finishPartitionResult(graph_, result);
  return result;
}

Expected<PartitionResult> SparseNnPartitioner::run() {
  available_ = devices_.front().availableMemBytes;
  for (const Device& device : devices_)
    if (device.availableMemBytes != available_)
      return Error(ErrorCode::InvalidArgument) << "sparse_nn needs devices of one memory size; '" << device.name
                                               << "' has " << device.availableMemBytes << ", the first has " << available_;
  std::vector<std::size_t> embedding, dense;
  CLEAVE_CHECK(formPartitions(embedding, dense));
  // Phase 2: merge small partitions of each kind (torch's combine_partitions_based_on_size).
  CLEAVE_CHECK(combineBySize(dense));
  CLEAVE_CHECK(combineBySize(embedding));
  CLEAVE_CHECK(placeOnDevices(embedding, dense));
  return orderedResult();
}

} // namespace

Expected<PartitionResult> partitionSparseNn(const ir::Graph& graph, const DeviceSet& devices) {
  CLEAVE_TRY(std::optional<PartitionResult> whole, placeWholeModel(graph, devices));
  if (whole)
    return std::move(*whole);
  return SparseNnPartitioner(graph, devices).run();
}

} // namespace cleave::partition
