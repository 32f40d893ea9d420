#include "partition/optimal.h"

#include <algorithm>
#include <limits>

namespace cleave::partition {
using ir::NodeId;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::uint32_t kNone = UINT32_MAX;

// Per callable position: distinct callable user positions (sorted), distinct callable producer
// positions, distinct input/constant producers. CSR arrays.
struct PositionGraph {
  std::vector<std::uint32_t> userStart, users, producerStart, producers, sourceStart;
  std::vector<NodeId> sources;
};

PositionGraph buildPositionGraph(const ir::Graph& graph, const std::vector<NodeId>& callable,
                                 const IdVector<NodeId, std::uint32_t>& position) {
  PositionGraph pg;
  std::vector<std::uint32_t> stamp(graph.numNodes(), kNone);
  pg.userStart.push_back(0);
  pg.producerStart.push_back(0);
  pg.sourceStart.push_back(0);
  for (std::uint32_t i = 0; i < callable.size(); ++i) {
    NodeId node = callable[i];
    std::size_t first = pg.users.size();
    for (ir::ValueId value : graph.outputs(node))
      for (NodeId user : graph.users(value))
        if (graph.isCallable(user) && stamp[index(user)] != i) {
          stamp[index(user)] = i;
          pg.users.push_back(position[user]);
        }
    std::sort(pg.users.begin() + static_cast<std::ptrdiff_t>(first), pg.users.end());
    pg.userStart.push_back(static_cast<std::uint32_t>(pg.users.size()));
    for (NodeId producer : inputNodesOf(graph, node)) {
      if (graph.isCallable(producer))
        pg.producers.push_back(position[producer]);
      else if (graph.kind(producer) == ir::NodeKind::Input || graph.kind(producer) == ir::NodeKind::Parameter)
        pg.sources.push_back(producer);
    }
    pg.producerStart.push_back(static_cast<std::uint32_t>(pg.producers.size()));
    pg.sourceStart.push_back(static_cast<std::uint32_t>(pg.sources.size()));
  }
  return pg;
}

// Bytes crossing the cut before position i: callable outputs made before i and read at or after.
std::vector<double> crossingBytes(const PositionGraph& pg, const std::vector<NodeId>& callable,
                                  const IdVector<NodeId, NodeSize>& sizes) {
  std::size_t count = callable.size();
  std::vector<double> delta(count + 2, 0.0), crossing(count + 1, 0.0);
  for (std::uint32_t i = 0; i < count; ++i)
    if (pg.userStart[i + 1] > pg.userStart[i]) {
      std::uint32_t last = pg.users[pg.userStart[i + 1] - 1];
      double bytes = static_cast<double>(sizes[callable[i]].outputBytes);
      delta[i + 1] += bytes;
      delta[last + 1] -= bytes;
    }
  double running = 0.0;
  for (std::size_t i = 0; i <= count; ++i) {
    running += delta[i];
    crossing[i] = running;
  }
  return crossing;
}

// The dynamic program over (segment end j, device d), one phase per method.
class OptimalCut {
public:
  OptimalCut(const ir::Graph& graph, const DeviceSet& devices, const IdVector<NodeId, NodeLatency>& latencies,
             const TransferRates& rates, Objective objective, const std::optional<DeviceSupport>& support)
      : graph_(graph), devices_(devices), latencies_(latencies), rates_(rates), objective_(objective),
        support_(support), sizes_(computeNodeSizes(graph)), position_(graph.numNodes(), kNone) {
    for (std::uint32_t n = 0; n < graph.numNodes(); ++n)
      if (graph.isCallable(NodeId{n})) {
        position_[NodeId{n}] = static_cast<std::uint32_t>(callable_.size());
        callable_.push_back(NodeId{n});
      }
    count_ = callable_.size();
    deviceCount_ = devices.devices.size();
    pg_ = buildPositionGraph(graph, callable_, position_);
    crossing_ = crossingBytes(pg_, callable_, sizes_);
    for (const Device& device : devices.devices)
      largest_ = std::max(largest_, device.availableMemBytes);
    std::size_t cells = (count_ + 1) * deviceCount_;
    best_.assign(cells, kInf);
    entry_.assign(cells, kInf);
    segmentStart_.assign(cells, kNone);
    entryFrom_.assign(cells, kNone);
    for (std::size_t d = 0; d < deviceCount_; ++d)
      entry_[d] = 0.0;
    pathFrom_.assign(count_, 0.0);
    sourceStamp_.assign(graph.numNodes(), kNone);
  }

  Expected<PartitionResult> run() {
    for (std::uint32_t j = 1; j <= count_; ++j) {
      closeSegmentsAt(j);
      if (j < count_)
        openSegmentsAt(j);
    }
    CLEAVE_TRY(std::size_t lastDevice, bestLastDevice());
    return resultOf(walkBack(lastDevice));
  }

private:
  double combine(double a, double b) const {
    return objective_ == Objective::CriticalPath ? a + b : std::max(a, b);
  }

  // best[j, d] over every segment [i, j) on device d, for i from j - 1 down while one can fit:
  // the segment's latency is its longest internal path; its memory follows the memory model.
  void closeSegmentsAt(std::uint32_t j) {
    double segmentLatency = 0.0;
    std::int64_t bytes = 0, ownBytes = 0;
    std::uint64_t blocked = 0;
    for (std::uint32_t i = j; i-- > 0;) {
      NodeId node = callable_[i];
      double longestAfter = 0.0; // the longest path starting at i inside [i, j)
      std::uint32_t readers = 0;
      for (std::uint32_t k = pg_.userStart[i]; k < pg_.userStart[i + 1] && pg_.users[k] < j; ++k) {
        longestAfter = std::max(longestAfter, pathFrom_[pg_.users[k]]);
        ++readers;
      }
      const NodeLatency& own = latencies_[node];
      pathFrom_[i] = std::max(own.memSec, own.computeSec) + longestAfter;
      segmentLatency = std::max(segmentLatency, pathFrom_[i]);
      bytes += addedBytes(i, j, readers);
      ownBytes += sizes_[node].totalBytes;
      if (ownBytes > largest_)
        break; // never fits again: own sizes only grow
      if (support_)
        blocked |= ~support_->mask[node] & support_->all;
      for (std::size_t d = 0; d < deviceCount_; ++d) {
        if ((blocked >> d) & 1u || bytes > devices_.devices[d].availableMemBytes)
          continue;
        double candidate = combine(entry_[i * deviceCount_ + d], segmentLatency);
        if (candidate < best_[j * deviceCount_ + d]) {
          best_[j * deviceCount_ + d] = candidate;
          segmentStart_[j * deviceCount_ + d] = i;
        }
      }
      if (support_ && blocked == support_->all)
        break;
    }
  }

  // What node i adds to the memory of segment [i, j): its own size, its output no longer an
  // outside input of its `readers` inside, its callable inputs from outside (once per reading
  // node), its inputs/constants once per segment.
  std::int64_t addedBytes(std::uint32_t i, std::uint32_t j, std::uint32_t readers) {
    NodeId node = callable_[i];
    std::int64_t bytes = sizes_[node].totalBytes - static_cast<std::int64_t>(readers) * sizes_[node].outputBytes;
    for (std::uint32_t k = pg_.producerStart[i]; k < pg_.producerStart[i + 1]; ++k)
      bytes += sizes_[callable_[pg_.producers[k]]].outputBytes;
    for (std::uint32_t k = pg_.sourceStart[i]; k < pg_.sourceStart[i + 1]; ++k)
      if (NodeId source = pg_.sources[k]; sourceStamp_[index(source)] != j) {
        sourceStamp_[index(source)] = j;
        bytes += sizes_[source].totalBytes;
      }
    return bytes;
  }

  // entry[j, d]: the best cut ending at j on an earlier device, plus the transfer over the cut.
  void openSegmentsAt(std::uint32_t j) {
    for (std::size_t d = 0; d < deviceCount_; ++d)
      for (std::size_t from = 0; from < d; ++from) {
        double before = best_[j * deviceCount_ + from];
        if (before == kInf)
          continue;
        double rate = rates_.between(devices_.devices[from].logicalId, devices_.devices[d].logicalId);
        double candidate = combine(before, crossing_[j] / rate);
        if (candidate < entry_[j * deviceCount_ + d]) {
          entry_[j * deviceCount_ + d] = candidate;
          entryFrom_[j * deviceCount_ + d] = static_cast<std::uint32_t>(from);
        }
      }
  }

  Expected<std::size_t> bestLastDevice() const {
    std::size_t last = deviceCount_;
    for (std::size_t d = 0; d < deviceCount_; ++d)
      if (best_[count_ * deviceCount_ + d] < kInf &&
          (last == deviceCount_ || best_[count_ * deviceCount_ + d] < best_[count_ * deviceCount_ + last]))
        last = d;
    if (last == deviceCount_)
      return Error(ErrorCode::DoesNotFit) << "no contiguous cut of the " << count_
                                          << " operations fits the devices, one segment per device";
    return last;
  }

  // The chosen segments as (start position, device), in order.
  std::vector<std::pair<std::uint32_t, std::size_t>> walkBack(std::size_t device) const {
    std::vector<std::pair<std::uint32_t, std::size_t>> segments;
    auto end = static_cast<std::uint32_t>(count_);
    while (true) {
      std::uint32_t start = segmentStart_[end * deviceCount_ + device];
      segments.push_back({start, device});
      if (start == 0)
        break;
      device = entryFrom_[start * deviceCount_ + device];
      end = start;
    }
    std::reverse(segments.begin(), segments.end());
    return segments;
  }

  PartitionResult resultOf(const std::vector<std::pair<std::uint32_t, std::size_t>>& segments) const {
    PartitionResult result = startPartitionResult(graph_);
    IdVector<NodeId, std::uint8_t> scratch(graph_.numNodes(), 0);
    for (std::size_t k = 0; k < segments.size(); ++k) {
      std::uint32_t start = segments[k].first;
      std::uint32_t stop = k + 1 < segments.size() ? segments[k + 1].first : static_cast<std::uint32_t>(count_);
      std::vector<NodeId> nodes(callable_.begin() + start, callable_.begin() + stop);
      MappedPartition partition = makePartition(graph_, sizes_, nodes, scratch);
      appendPartition(result, static_cast<std::int64_t>(k), std::move(nodes),
                      {devices_.devices[segments[k].second].logicalId}, partition.usedBytes);
    }
    finishPartitionResult(graph_, result);
    return result;
  }

  const ir::Graph& graph_;
  const DeviceSet& devices_;
  const IdVector<NodeId, NodeLatency>& latencies_;
  const TransferRates& rates_;
  Objective objective_;
  const std::optional<DeviceSupport>& support_;
  IdVector<NodeId, NodeSize> sizes_;
  std::vector<NodeId> callable_;
  IdVector<NodeId, std::uint32_t> position_;
  std::size_t count_ = 0, deviceCount_ = 0;
  PositionGraph pg_;
  std::vector<double> crossing_;
  std::int64_t largest_ = 0;
  // best[j*D + d]: the best cut of positions [0, j) whose last segment runs on device d.
  // entry[i*D + d]: the best value before a segment starting at i on device d (its transfer in).
  std::vector<double> best_, entry_;
  std::vector<std::uint32_t> segmentStart_, entryFrom_;
  std::vector<double> pathFrom_;           // per position: the longest path from it in the segment
  std::vector<std::uint32_t> sourceStamp_; // per node: the segment end it was last counted for
};
} // namespace

Expected<PartitionResult> partitionOptimal(const ir::Graph& graph, const DeviceSet& devices,
                                           const IdVector<NodeId, NodeLatency>& latencies,
                                           const TransferRates& rates, Objective objective) {
  CLEAVE_TRY(std::optional<PartitionResult> whole, placeWholeModel(graph, devices));
  if (whole)
    return std::move(*whole);
  CLEAVE_TRY(std::optional<DeviceSupport> support, supportOf(graph, devices));
  return OptimalCut(graph, devices, latencies, rates, objective, support).run();
}

} // namespace cleave::partition
