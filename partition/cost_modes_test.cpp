// Tests of the cost-driven modes: optimal (against brute force), cost_aware and kl_based
// (invariants and never worse than their starting points), heterogeneous devices, transfer
// rate matrices.
#include "partition/assignment_cost.h"
#include "partition/cost_aware.h"
#include "partition/kl_based.h"
#include "partition/optimal.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "testing/test_graphs.h"

namespace cleave::partition {
namespace {
using cleave::testing::TestGraph;
using ir::NodeId;

DeviceSet devicesOf(const std::vector<std::int64_t>& bytes) {
  DeviceSet set;
  for (std::size_t i = 0; i < bytes.size(); ++i)
    set.devices.push_back({"dev_" + std::to_string(i), static_cast<std::int64_t>(i), bytes[i], ""});
  return set;
}

// A random DAG of Add/Relu nodes; each reads one of the last few values and sometimes a
// parameter or an older value.
ir::Graph randomGraph(std::mt19937& rng, int count) {
  TestGraph t;
  t.input("x");
  std::vector<std::string> values = {"x"};
  for (int i = 0; i < count; ++i) {
    std::string name = "n" + std::to_string(i);
    std::vector<std::string> inputs{values[values.size() - 1 - rng() % std::min<std::size_t>(3, values.size())]};
    if (rng() % 3 == 0) {
      t.param("w" + std::to_string(i));
      inputs.push_back("w" + std::to_string(i));
    } else if (rng() % 2) {
      inputs.push_back(values[rng() % values.size()]);
    }
    t.op(inputs.size() == 1 ? "Relu" : "Add", name, inputs);
    values.push_back(name);
  }
  t.output({values.back()});
  return t.build();
}

IdVector<NodeId, NodeLatency> randomLatencies(const ir::Graph& g, std::mt19937& rng) {
  IdVector<NodeId, NodeLatency> latencies(g.numNodes());
  for (std::uint32_t n = 0; n < g.numNodes(); ++n)
    latencies[NodeId{n}] = {static_cast<double>(rng() % 5), static_cast<double>(1 + rng() % 9)};
  return latencies;
}

std::vector<NodeId> callableOf(const ir::Graph& g) {
  std::vector<NodeId> callable;
  for (std::uint32_t n = 0; n < g.numNodes(); ++n)
    if (g.isCallable(NodeId{n}))
      callable.push_back(NodeId{n});
  return callable;
}

// The DP's objective for one cut, computed from scratch: segment latency by partitionLatencies,
// bytes by makePartition, crossing bytes by scanning every edge.
struct BruteForce {
  const ir::Graph& g;
  const DeviceSet& devices;
  const IdVector<NodeId, NodeLatency>& latencies;
  const TransferRates& rates;
  Objective objective;
  std::vector<NodeId> callable = callableOf(g);
  IdVector<NodeId, NodeSize> sizes = computeNodeSizes(g);
  double best = kInfeasible;

  double crossing(std::size_t cut) const {
    double bytes = 0;
    for (std::size_t i = 0; i < cut; ++i) {
      bool read = false;
      for (ir::ValueId value : g.outputs(callable[i]))
        for (NodeId user : g.users(value))
          for (std::size_t k = cut; k < callable.size(); ++k)
            read = read || callable[k] == user;
      if (read)
        bytes += static_cast<double>(sizes[callable[i]].outputBytes);
    }
    return bytes;
  }
  double segmentLatency(std::size_t start, std::size_t stop) const {
    plan::CutPlan plan;
    plan.submoduleOf = IdVector<NodeId, std::uint32_t>(g.numNodes(), plan::kNoSubmodule);
    plan.submodules.push_back({"s", plan::SubmoduleRole::Partition, {callable.begin() + start, callable.begin() + stop}, {}, -1});
    for (std::size_t k = start; k < stop; ++k)
      plan.submoduleOf[callable[k]] = 0;
    return partitionLatencies(g, plan, latencies)[0].overallSec;
  }
  // Segments from `start` on devices after `lastDevice`, with `value` so far.
  void search(std::size_t start, std::size_t lastDevice, double value) {
    if (start == callable.size()) {
      best = std::min(best, value);
      return;
    }
    IdVector<NodeId, std::uint8_t> scratch(g.numNodes(), 0);
    for (std::size_t stop = start + 1; stop <= callable.size(); ++stop) {
      std::int64_t bytes =
          makePartition(g, sizes, {callable.begin() + start, callable.begin() + stop}, scratch).usedBytes;
      double latency = segmentLatency(start, stop);
      for (std::size_t d = lastDevice + 1; d < devices.devices.size(); ++d) {
        if (bytes > devices.devices[d].availableMemBytes)
          continue;
        double next = value;
        if (start > 0) {
          double transfer = crossing(start) / rates.between(devices.devices[lastDevice].logicalId,
                                                            devices.devices[d].logicalId);
          next = objective == Objective::CriticalPath ? next + transfer : std::max(next, transfer);
        }
        next = objective == Objective::CriticalPath ? next + latency : std::max(next, latency);
        search(stop, d, next);
      }
    }
  }
};

double objectiveOf(const ir::Graph& g, const PartitionResult& result, const IdVector<NodeId, NodeLatency>& latencies,
                   const DeviceSet& devices, const TransferRates& rates, Objective objective) {
  std::vector<PartitionLatency> perPartition = partitionLatencies(g, result.plan, latencies);
  BruteForce helper{g, devices, latencies, rates, objective};
  double value = 0;
  std::size_t position = 0;
  for (std::size_t p = 0; p < result.partitions.size(); ++p) {
    if (p > 0) {
      double transfer = helper.crossing(position) /
                        rates.between(result.partitions[p - 1].logicalDeviceIds[0], result.partitions[p].logicalDeviceIds[0]);
      value = objective == Objective::CriticalPath ? value + transfer : std::max(value, transfer);
    }
    value = objective == Objective::CriticalPath ? value + perPartition[p].overallSec
                                                 : std::max(value, perPartition[p].overallSec);
    position += result.plan.submodules[p].nodes.size();
  }
  return value;
}

TEST(Optimal, MatchesBruteForceOnRandomGraphs) {
  int compared = 0;
  for (std::uint32_t seed = 0; seed < 500; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    ir::Graph g = randomGraph(rng, 2 + static_cast<int>(rng() % 9));
    IdVector<NodeId, NodeLatency> latencies = randomLatencies(g, rng);
    std::vector<std::int64_t> bytes;
    for (int d = 0, count = 2 + static_cast<int>(rng() % 3); d < count; ++d)
      bytes.push_back(200 + static_cast<std::int64_t>(rng() % 500));
    DeviceSet devices = devicesOf(bytes);
    TransferRates rates{1.0 + static_cast<double>(rng() % 64), &devices};
    Objective objective = seed % 2 ? Objective::Bottleneck : Objective::CriticalPath;
    Expected<std::optional<PartitionResult>> whole = placeWholeModel(g, devices);
    if (!whole || *whole)
      continue; // refused or one partition: nothing to cut
    BruteForce brute{g, devices, latencies, rates, objective};
    brute.search(0, SIZE_MAX, 0.0);
    Expected<PartitionResult> result = partitionOptimal(g, devices, latencies, rates, objective);
    if (brute.best == kInfeasible) {
      ASSERT_FALSE(result);
      EXPECT_EQ(result.error().code(), ErrorCode::DoesNotFit);
      continue;
    }
    ASSERT_TRUE(result) << result.error().message();
    EXPECT_DOUBLE_EQ(objectiveOf(g, *result, latencies, devices, rates, objective), brute.best);
    for (std::size_t p = 0; p < result->partitions.size(); ++p) {
      std::size_t d = devices.indexOf(result->partitions[p].logicalDeviceIds[0]);
      EXPECT_LE(result->partitions[p].usedMemBytes, devices.devices[d].availableMemBytes);
    }
    ++compared;
  }
  EXPECT_GT(compared, 100);
}

TEST(Optimal, BalancesTheBottleneckOfAChain) {
  // Latencies 24 33 6 3 54 15 12 33 on four devices: the best bottleneck is 60.
  TestGraph t;
  t.input("x");
  std::string previous = "x";
  for (int i = 0; i < 8; ++i) {
    t.op("Relu", "r" + std::to_string(i), {previous});
    previous = "r" + std::to_string(i);
  }
  ir::Graph g = t.output({previous}).build();
  const double costs[] = {24, 33, 6, 3, 54, 15, 12, 33};
  IdVector<NodeId, NodeLatency> latencies(g.numNodes());
  std::vector<NodeId> callable = callableOf(g);
  for (std::size_t i = 0; i < callable.size(); ++i)
    latencies[callable[i]] = {0.0, costs[i]};
  DeviceSet devices = devicesOf({1000, 1000, 1000, 1000});
  TransferRates rates{1e12, &devices};
  // The whole chain (9 x 64 bytes) would fit one device; make them small enough to need a cut.
  for (Device& device : devices.devices)
    device.availableMemBytes = 400;
  Expected<PartitionResult> result = partitionOptimal(g, devices, latencies, rates, Objective::Bottleneck);
  ASSERT_TRUE(result) << result.error().message();
  std::vector<PartitionLatency> perPartition = partitionLatencies(g, result->plan, latencies);
  double worst = 0;
  for (const PartitionLatency& latency : perPartition)
    worst = std::max(worst, latency.overallSec);
  EXPECT_NEAR(worst, 60.0, 1e-6);
}

void expectValidPartitioning(const ir::Graph& g, const DeviceSet& devices, const PartitionResult& result) {
  std::vector<int> seen(g.numNodes(), 0);
  for (std::size_t p = 0; p < result.partitions.size(); ++p) {
    for (NodeId node : result.plan.submodules[p].nodes)
      ++seen[index(node)];
    ASSERT_FALSE(result.partitions[p].logicalDeviceIds.empty());
    for (std::int64_t id : result.partitions[p].logicalDeviceIds)
      EXPECT_LE(result.partitions[p].usedMemBytes, devices.devices[devices.indexOf(id)].availableMemBytes);
  }
  for (std::uint32_t n = 0; n < g.numNodes(); ++n)
    ASSERT_EQ(seen[n], g.isCallable(NodeId{n}) ? 1 : 0);
  for (std::uint32_t n = 0; n < g.numNodes(); ++n)
    for (ir::ValueId value : g.inputs(NodeId{n})) {
      NodeId producer = g.producer(value);
      if (g.isCallable(producer) && g.isCallable(NodeId{n}))
        ASSERT_LE(result.plan.submoduleOf[producer], result.plan.submoduleOf[NodeId{n}]); // topological
    }
}

double criticalPathOf(const ir::Graph& g, const PartitionResult& result, const IdVector<NodeId, NodeLatency>& latencies,
                      const TransferRates& rates) {
  std::vector<std::vector<std::int64_t>> ids;
  for (const PartitionInfo& info : result.partitions)
    ids.push_back(info.logicalDeviceIds);
  Expected<CriticalPath> path = criticalPath(g, result.plan, ids, partitionLatencies(g, result.plan, latencies),
                                             computeNodeSizes(g), rates);
  EXPECT_TRUE(path);
  return path ? path->latencySec : kInfeasible;
}

TEST(CostModes, NeverWorseThanTheirStartsOnRandomGraphs) {
  int cut = 0;
  for (std::uint32_t seed = 0; seed < 150; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed + 1000);
    ir::Graph g = randomGraph(rng, 4 + static_cast<int>(rng() % 40));
    IdVector<NodeId, NodeLatency> latencies = randomLatencies(g, rng);
    std::int64_t total = 0;
    IdVector<NodeId, NodeSize> sizes = computeNodeSizes(g);
    for (std::uint32_t n = 0; n < g.numNodes(); ++n)
      total += sizes[NodeId{n}].totalBytes;
    int count = 2 + static_cast<int>(rng() % 4);
    DeviceSet devices = devicesOf(std::vector<std::int64_t>(static_cast<std::size_t>(count), total / count + total / 3));
    TransferRates rates{static_cast<double>(16 + rng() % 64), &devices};
    Expected<PartitionResult> sized = partitionBySize(g, devices);
    if (!sized || sized->singlePartition)
      continue;
    ++cut;
    double sizedPath = criticalPathOf(g, *sized, latencies, rates);
    Expected<PartitionResult> kl = partitionKlBased(g, devices, latencies, rates);
    ASSERT_TRUE(kl) << kl.error().message();
    expectValidPartitioning(g, devices, *kl);
    EXPECT_LE(criticalPathOf(g, *kl, latencies, rates), sizedPath + 1e-9);
    Expected<PartitionResult> costAware = partitionCostAware(g, devices, latencies, rates);
    ASSERT_TRUE(costAware) << costAware.error().message();
    expectValidPartitioning(g, devices, *costAware);
    Expected<PartitionResult> contiguous = partitionOptimal(g, devices, latencies, rates, Objective::CriticalPath);
    if (contiguous) {
      expectValidPartitioning(g, devices, *contiguous);
      EXPECT_LE(criticalPathOf(g, *costAware, latencies, rates), criticalPathOf(g, *contiguous, latencies, rates) + 1e-9);
    }
  }
  EXPECT_GT(cut, 60);
}

TEST(CostModes, EveryModeKeepsNodesOnDevicesThatSupportThem) {
  // Device 0 runs only Add; device 1 runs everything. Relu nodes must land on device 1.
  std::mt19937 rng(5);
  ir::Graph g = randomGraph(rng, 30);
  Expected<DeviceSet> devices = parseDevices(R"({"devices": [
      {"logical_id": 0, "available_mem_bytes": 2000, "profile": {"ops": ["Add"]}},
      {"logical_id": 1, "available_mem_bytes": 2000}, {"logical_id": 2, "available_mem_bytes": 2000}]})",
                                             "d.json");
  ASSERT_TRUE(devices) << devices.error().message();
  IdVector<NodeId, NodeLatency> latencies = randomLatencies(g, rng);
  TransferRates rates{10.0, &*devices};
  std::vector<std::function<Expected<PartitionResult>()>> modes = {
      [&] { return partitionBySize(g, *devices); },
      [&] { return partitionOptimal(g, *devices, latencies, rates, Objective::CriticalPath); },
      [&] { return partitionCostAware(g, *devices, latencies, rates); },
      [&] { return partitionKlBased(g, *devices, latencies, rates); }};
  for (std::size_t m = 0; m < modes.size(); ++m) {
    SCOPED_TRACE("mode " + std::to_string(m));
    Expected<PartitionResult> result = modes[m]();
    ASSERT_TRUE(result) << result.error().message();
    expectValidPartitioning(g, *devices, *result);
    for (std::size_t p = 0; p < result->partitions.size(); ++p)
      for (std::int64_t id : result->partitions[p].logicalDeviceIds)
        if (id == 0)
          for (NodeId node : result->plan.submodules[p].nodes)
            EXPECT_EQ(g.target(node), "Add") << g.name(node);
  }
}

TEST(CostModes, ANodeNoDeviceSupportsIsNamed) {
  std::mt19937 rng(2);
  ir::Graph g = randomGraph(rng, 6);
  Expected<DeviceSet> devices = parseDevices(R"({"devices": [
      {"logical_id": 0, "available_mem_bytes": 100, "profile": {"ops": ["Add"]}},
      {"logical_id": 1, "available_mem_bytes": 100, "profile": {"ops": ["Add"]}}]})", "d.json");
  ASSERT_TRUE(devices);
  Expected<PartitionResult> result = partitionBySize(g, *devices);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), ErrorCode::DoesNotFit);
  EXPECT_NE(result.error().message().find("(Relu) is supported by no device"), std::string::npos)
      << result.error().message();
}

TEST(Devices, TransferMatricesAndProfilesParseOrSayWhy) {
  Expected<DeviceSet> good = parseDevices(R"({"devices": [{"logical_id": 5, "available_mem_bytes": 10},
      {"logical_id": 7, "available_mem_bytes": 10}], "transfer_rate_bytes_per_sec": [[0, 4], [8, 0]]})", "d.json");
  ASSERT_TRUE(good) << good.error().message();
  TransferRates rates{1.0, &*good};
  EXPECT_EQ(rates.between(5, 7), 4.0);
  EXPECT_EQ(rates.between(7, 5), 8.0);
  EXPECT_EQ(rates.between(5, 5), 1.0);
  auto error = [](const std::string& text) {
    Expected<DeviceSet> set = parseDevices(text, "d.json");
    return set ? std::string() : set.error().message();
  };
  EXPECT_NE(error(R"({"devices": [{"logical_id": 0, "available_mem_bytes": 1}], "transfer_rate_bytes_per_sec": [[1], [1]]})")
                .find("needs 1 rows"), std::string::npos);
  EXPECT_NE(error(R"({"devices": [{"logical_id": 0, "available_mem_bytes": 1}, {"logical_id": 1, "available_mem_bytes": 1}],
                      "transfer_rate_bytes_per_sec": [[0, -1], [1, 0]]})").find("[0][1]: must be a positive"),
            std::string::npos);
  EXPECT_NE(error(R"({"devices": [{"logical_id": 0, "available_mem_bytes": 1, "profile": {"ops": 3}}]})")
                .find("devices[0].profile"), std::string::npos);
}

TEST(CostModes, AMatrixRateChangesTheCriticalPath) {
  TestGraph t;
  t.input("x").op("Relu", "a", {"x"}).op("Relu", "b", {"a"});
  ir::Graph g = t.output({"b"}).build();
  Expected<DeviceSet> devices = parseDevices(R"({"devices": [{"logical_id": 0, "available_mem_bytes": 150},
      {"logical_id": 1, "available_mem_bytes": 150}], "transfer_rate_bytes_per_sec": [[0, 64], [1, 0]]})", "d.json");
  ASSERT_TRUE(devices);
  IdVector<NodeId, NodeLatency> latencies(g.numNodes(), NodeLatency{0.0, 1.0});
  TransferRates rates{1.0, &*devices};
  Expected<PartitionResult> result = partitionBySize(g, *devices);
  ASSERT_TRUE(result);
  ASSERT_EQ(result->partitions.size(), 2u);
  // 64 bytes from device 0 to device 1 at 64 B/s: one second, plus one per node.
  EXPECT_DOUBLE_EQ(criticalPathOf(g, *result, latencies, rates), 3.0);
}

} // namespace
} // namespace cleave::partition
