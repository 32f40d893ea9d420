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
} // namespace

Expected<PartitionResult> partitionOptimal(const ir::Graph& graph, const DeviceSet& devices,
                                           const IdVector<NodeId, NodeLatency>& latencies,
                                           const TransferRates& rates, Objective objective) {
  CLEAVE_TRY(std::optional<PartitionResult> whole, placeWholeModel(graph, devices));
  if (whole)
    return std::move(*whole);
  CLEAVE_TRY(std::optional<DeviceSupport> support, supportOf(graph, devices));
  IdVector<NodeId, NodeSize> sizes = computeNodeSizes(graph);
  std::vector<NodeId> callable;
  IdVector<NodeId, std::uint32_t> position(graph.numNodes(), kNone);
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n)
    if (graph.isCallable(NodeId{n})) {
      position[NodeId{n}] = static_cast<std::uint32_t>(callable.size());
      callable.push_back(NodeId{n});
    }
  const std::size_t count = callable.size(), deviceCount = devices.devices.size();
  PositionGraph pg = buildPositionGraph(graph, callable, position);

  // Bytes crossing the cut before position i: callable outputs made before i and read at or after.
  std::vector<double> crossing(count + 1, 0.0);
  {
    std::vector<double> delta(count + 2, 0.0);
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
  }
  std::int64_t largest = 0;
  for (const Device& device : devices.devices)
    largest = std::max(largest, device.availableMemBytes);

  auto combine = [&](double a, double b) { return objective == Objective::CriticalPath ? a + b : std::max(a, b); };
  // best[j*D + d]: the best cut of positions [0, j) whose last segment runs on device d.
  // entry[i*D + d]: the best value before a segment starting at i on device d (its transfer in).
  std::vector<double> best((count + 1) * deviceCount, kInf), entry((count + 1) * deviceCount, kInf);
  std::vector<std::uint32_t> segmentStart((count + 1) * deviceCount, kNone), entryFrom((count + 1) * deviceCount, kNone);
  for (std::size_t d = 0; d < deviceCount; ++d)
    entry[d] = 0.0;

  std::vector<double> pathFrom(count, 0.0);
  std::vector<std::uint32_t> sourceStamp(graph.numNodes(), kNone);
  for (std::uint32_t j = 1; j <= count; ++j) {
    double segmentLatency = 0.0;
    std::int64_t bytes = 0, ownBytes = 0;
    std::uint64_t blocked = 0;
    for (std::uint32_t i = j; i-- > 0;) {
      NodeId node = callable[i];
      // The longest path starting at i inside [i, j).
      double longestAfter = 0.0;
      std::uint32_t readers = 0;
      for (std::uint32_t k = pg.userStart[i]; k < pg.userStart[i + 1] && pg.users[k] < j; ++k) {
        longestAfter = std::max(longestAfter, pathFrom[pg.users[k]]);
        ++readers;
      }
      const NodeLatency& own = latencies[node];
      pathFrom[i] = std::max(own.memSec, own.computeSec) + longestAfter;
      segmentLatency = std::max(segmentLatency, pathFrom[i]);
      // Memory: the node's own size, its output no longer an outside input of its readers, its
      // callable inputs from outside (once per reading node), its inputs/constants once.
      bytes += sizes[node].totalBytes - static_cast<std::int64_t>(readers) * sizes[node].outputBytes;
      ownBytes += sizes[node].totalBytes;
      for (std::uint32_t k = pg.producerStart[i]; k < pg.producerStart[i + 1]; ++k)
        bytes += sizes[callable[pg.producers[k]]].outputBytes;
      for (std::uint32_t k = pg.sourceStart[i]; k < pg.sourceStart[i + 1]; ++k)
        if (NodeId source = pg.sources[k]; sourceStamp[index(source)] != j) {
          sourceStamp[index(source)] = j;
          bytes += sizes[source].totalBytes;
        }
      if (ownBytes > largest)
        break; // never fits again: own sizes only grow
      if (support)
        blocked |= ~support->mask[node] & support->all;
      for (std::size_t d = 0; d < deviceCount; ++d) {
        if ((blocked >> d) & 1u || bytes > devices.devices[d].availableMemBytes)
          continue;
        double candidate = combine(entry[i * deviceCount + d], segmentLatency);
        if (candidate < best[j * deviceCount + d]) {
          best[j * deviceCount + d] = candidate;
          segmentStart[j * deviceCount + d] = i;
        }
      }
      if (support && blocked == support->all)
        break;
    }
    if (j == count)
      break;
    // Entries for segments starting at j: the best cut ending at j on an earlier device, plus the
    // transfer over the cut.
    for (std::size_t d = 0; d < deviceCount; ++d)
      for (std::size_t from = 0; from < d; ++from) {
        double before = best[j * deviceCount + from];
        if (before == kInf)
          continue;
        double rate = rates.between(devices.devices[from].logicalId, devices.devices[d].logicalId);
        double candidate = combine(before, crossing[j] / rate);
        if (candidate < entry[j * deviceCount + d]) {
          entry[j * deviceCount + d] = candidate;
          entryFrom[j * deviceCount + d] = static_cast<std::uint32_t>(from);
        }
      }
  }
  std::size_t lastDevice = deviceCount;
  for (std::size_t d = 0; d < deviceCount; ++d)
    if (best[count * deviceCount + d] < kInf &&
        (lastDevice == deviceCount || best[count * deviceCount + d] < best[count * deviceCount + lastDevice]))
      lastDevice = d;
  if (lastDevice == deviceCount)
    return Error(ErrorCode::DoesNotFit) << "no contiguous cut of the " << count
                                        << " operations fits the devices, one segment per device";
  // Walk back: segments in reverse.
  std::vector<std::pair<std::uint32_t, std::size_t>> segments; // (start, device), reversed
  std::uint32_t end = static_cast<std::uint32_t>(count);
  std::size_t device = lastDevice;
  while (true) {
    std::uint32_t start = segmentStart[end * deviceCount + device];
    segments.push_back({start, device});
    if (start == 0)
      break;
    std::size_t previous = entryFrom[start * deviceCount + device];
    end = start;
    device = previous;
  }
  std::reverse(segments.begin(), segments.end());
  PartitionResult result = startPartitionResult(graph);
  IdVector<NodeId, std::uint8_t> scratch(graph.numNodes(), 0);
  for (std::size_t k = 0; k < segments.size(); ++k) {
    std::uint32_t start = segments[k].first;
    std::uint32_t stop = k + 1 < segments.size() ? segments[k + 1].first : static_cast<std::uint32_t>(count);
    std::vector<NodeId> nodes(callable.begin() + start, callable.begin() + stop);
    MappedPartition partition = makePartition(graph, sizes, nodes, scratch);
    appendPartition(result, k, std::move(nodes), {devices.devices[segments[k].second].logicalId}, partition.usedBytes);
  }
  finishPartitionResult(graph, result);
  return result;
}

} // namespace cleave::partition
