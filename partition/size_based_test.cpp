#include "io/onnx.h"
#include "partition/aot_and_replicas.h"
#include "partition/sparse_nn.h"
#include "partition/size_based.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "testing/test_graphs.h"

namespace cleave::partition {
namespace {
using cleave::testing::TestGraph;

TEST(Devices, RejectsBadDeviceFiles) {
  auto error = [](const std::string& text) {
    Expected<DeviceSet> set = parseDevices(text, "d.json");
    EXPECT_FALSE(set);
    return set ? std::string() : set.error().message();
  };
  EXPECT_NE(error(R"({"devices": []})").find("no devices"), std::string::npos);
  EXPECT_NE(error(R"({"devices": [{"logical_id": 0, "available_mem_bytes": 10}, {"logical_id": 0, "available_mem_bytes": 5}]})")
                .find("repeats logical id 0"), std::string::npos);
  EXPECT_NE(error(R"({"devices": [{"logical_id": 0, "available_mem_bytes": 0}]})").find("available_mem_bytes: expected an integer in [1, "),
            std::string::npos);
  EXPECT_NE(error(R"({"devices": [{"logical_id": 0}]})").find("devices[0]"), std::string::npos);
  EXPECT_NE(error("{").find("invalid JSON"), std::string::npos);
  Expected<DeviceSet> good = parseDevices(R"({"devices": [{"name": "a", "logical_id": 3, "available_mem_bytes": 7}],
                                             "transfer_rate_bytes_per_sec": 2})", "d.json");
  ASSERT_TRUE(good);
  EXPECT_EQ(good->devices[0].logicalId, 3);
  EXPECT_EQ(good->transferRateBytesPerSec, 2.0);
}

DeviceSet uniform(int count, std::int64_t bytes) {
  DeviceSet set;
  for (int i = 0; i < count; ++i)
    set.devices.push_back({"dev_" + std::to_string(i), i, bytes, ""});
  return set;
}

TEST(SizeBased, FitsOneDeviceWhenItCan) {
  ir::Graph g = TestGraph().input("x").param("w").op("MatMul", "mm", {"x", "w"}).output({"mm"}).build();
  DeviceSet devices = uniform(2, 1000);
  devices.devices[1].availableMemBytes = 2000;
  Expected<PartitionResult> result = partitionBySize(g, devices);
  ASSERT_TRUE(result);
  EXPECT_TRUE(result->singlePartition);
  EXPECT_EQ(result->partitions[0].logicalDeviceIds, std::vector<std::int64_t>{1});
  EXPECT_EQ(result->partitions[0].usedMemBytes, 3 * 64);
}

TEST(SizeBased, RefusesWhatCannotFitAndSaysByHowMuch) {
  ir::Graph g = TestGraph().input("x").param("w").op("MatMul", "mm", {"x", "w"}).output({"mm"}).build();
  Expected<PartitionResult> result = partitionBySize(g, uniform(2, 50));
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), ErrorCode::DoesNotFit);
  EXPECT_NE(result.error().message().find("92 short"), std::string::npos);
}

TEST(AheadOfTime, RefusesBadMappings) {
  ir::Graph g = TestGraph().input("x").op("Relu", "a", {"x"}).op("Relu", "b", {"a"}).op("Relu", "c", {"b"})
                    .output({"c"}).build();
  DeviceSet devices = uniform(2, 1000);
  auto error = [&](const std::string& json) {
    Expected<PartitionResult> result = partitionAheadOfTime(g, devices, json, "aot.json");
    EXPECT_FALSE(result);
    return result ? std::string() : result.error().message();
  };
  EXPECT_NE(error(R"({"node_to_partition": {"a": 0, "b": 1, "c": 0}, "partition_to_logical_devices": {"0": [0], "1": [1]}})")
                .find("cycle"), std::string::npos);
  EXPECT_NE(error(R"({"node_to_partition": {"a": 0, "b": 0}, "partition_to_logical_devices": {"0": [0]}})")
                .find("node 'c' has no partition"), std::string::npos);
  EXPECT_NE(error(R"({"node_to_partition": {"a": 0, "b": 0, "c": 0}, "partition_to_logical_devices": {"0": [7]}})")
                .find("unknown logical device 7"), std::string::npos);
  EXPECT_NE(error(R"({"node_to_partition": {"a": 0, "b": 0, "c": 1}, "partition_to_logical_devices": {"0": [0]}})")
                .find("partition 1 of node 'c' has no logical devices"), std::string::npos);
  Expected<PartitionResult> ok = partitionAheadOfTime(
      g, devices, R"({"node_to_partition": {"a": 1, "b": 1, "c": 0}, "partition_to_logical_devices": {"0": [0], "1": [1]}})",
      "aot.json");
  ASSERT_TRUE(ok);
  // Partition 1 feeds partition 0, so it runs first.
  EXPECT_EQ(ok->plan.submodules[0].name, "partition_1");
  EXPECT_EQ(ok->partitions[0].logicalDeviceIds, std::vector<std::int64_t>{1});
}

TEST(SaturateHost, ReplicatesOntoIdleDevicesThatFit) {
  ir::Graph g = TestGraph().input("x").param("w").op("MatMul", "mm", {"x", "w"}).output({"mm"}).build();
  DeviceSet devices = uniform(4, 1000);
  devices.devices[2].availableMemBytes = 100; // too small for the replica
  Expected<PartitionResult> result = partitionBySize(g, devices);
  ASSERT_TRUE(result);
  *result = saturateHost(devices, std::move(*result));
  EXPECT_EQ(result->partitions[0].logicalDeviceIds, (std::vector<std::int64_t>{0, 1, 3}));
}

TEST(SparseNn, FindsTheEmbeddingBagLoopsOfAnOnnxModel) {
  Expected<ir::Graph> g = io::readOnnx(std::string(CLEAVE_SOURCE_DIR) + "/examples/dlrm.onnx");
  ASSERT_TRUE(g) << g.error().message();
  std::vector<std::string> embedding;
  for (std::uint32_t n = 0; n < g->numNodes(); ++n)
    if (g->isCallable(ir::NodeId{n}) && isEmbeddingNode(*g, ir::NodeId{n}))
      embedding.emplace_back(g->name(ir::NodeId{n}));
  EXPECT_EQ(embedding, (std::vector<std::string>{"/embeddings.0/Loop", "/embeddings.1/Loop", "/embeddings.2/Loop"}));
}

TEST(SparseNn, RefusesDevicesOfDifferentSizes) {
  ir::Graph g = TestGraph().input("x").param("w").op("MatMul", "mm", {"x", "w"}).op("Relu", "r", {"mm"})
                    .output({"r"}).build();
  DeviceSet devices = uniform(2, 150);
  devices.devices[1].availableMemBytes = 160;
  Expected<PartitionResult> result = partitionSparseNn(g, devices);
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message().find("one memory size"), std::string::npos);
}

TEST(SizeBasedProperties, PartitionsFitTheirDevicesOnRandomGraphs) {
  int multi = 0;
  for (std::uint32_t seed = 0; seed < 500; ++seed) {
    std::mt19937 rng(seed);
    TestGraph t;
    t.input("x");
    std::vector<std::string> values = {"x"};
    int count = 2 + static_cast<int>(rng() % 40);
    for (int i = 0; i < count; ++i) {
      std::string name = "n" + std::to_string(i);
      if (rng() % 3 == 0) {
        t.param("w" + std::to_string(i));
        values.push_back("w" + std::to_string(i));
      }
      std::vector<std::string> inputs{values[values.size() - 1 - rng() % std::min<std::size_t>(3, values.size())]};
      if (rng() % 2)
        inputs.push_back(values[rng() % values.size()]);
      t.op("Add", name, inputs);
      values.push_back(name);
    }
    t.output({values.back()});
    ir::Graph g = t.build();
    DeviceSet devices = uniform(1 + static_cast<int>(rng() % 6), 150 + static_cast<std::int64_t>(rng() % 2000));
    Expected<PartitionResult> result = partitionBySize(g, devices);
    if (!result) {
      EXPECT_EQ(result.error().code(), ErrorCode::DoesNotFit) << result.error().message();
      continue;
    }
    SCOPED_TRACE("seed " + std::to_string(seed));
    multi += result->partitions.size() > 1;
    std::vector<int> seen(g.numNodes(), 0);
    std::map<std::int64_t, std::int64_t> used;
    for (std::size_t p = 0; p < result->partitions.size(); ++p) {
      for (ir::NodeId node : result->plan.submodules[p].nodes)
        ++seen[index(node)];
      ASSERT_EQ(result->partitions[p].logicalDeviceIds.size(), 1u);
      used[result->partitions[p].logicalDeviceIds[0]] += result->partitions[p].usedMemBytes;
    }
    for (std::uint32_t n = 0; n < g.numNodes(); ++n)
      ASSERT_EQ(seen[n], g.isCallable(ir::NodeId{n}) ? 1 : 0);
    // Each partition fits its device on its own (shared inputs may be counted once per device).
    for (std::size_t p = 0; p < result->partitions.size(); ++p)
      ASSERT_LE(result->partitions[p].usedMemBytes, devices.devices[0].availableMemBytes);
    // Partition order is topological.
    for (std::uint32_t n = 0; n < g.numNodes(); ++n)
      for (ir::ValueId value : g.inputs(ir::NodeId{n})) {
        ir::NodeId producer = g.producer(value);
        if (g.isCallable(producer) && g.isCallable(ir::NodeId{n})) {
          ASSERT_LE(result->plan.submoduleOf[producer], result->plan.submoduleOf[ir::NodeId{n}]);
        }
      }
  }
  EXPECT_GT(multi, 50);
}

} // namespace
} // namespace cleave::partition
