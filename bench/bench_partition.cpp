// bench/bench_partition.cpp - time one partition mode (and the critical path) on a model.
//
//   bench_partition MODEL DEVICES.json [--repeat N] [--mode M]
//   bench_partition MODEL --reference [--repeat N] [--mode M]
//
// M: size_based (default), cost_aware, kl_based, optimal (critical_path objective).
// Loads once (timed apart), then runs the mode plus latencies and the critical path N times;
// prints best and median seconds, the partition count and the critical path.
// --reference reproduces shared/bench/reference/time_partitioner.py's set-up: four devices of
// total/4 + total/8 bytes (total: every node's size), every op NodeLatency(1.0, 2.0), transfer
// rate 1e9 bytes/s. Otherwise latencies are estimated (1 TFLOP/s, 100 GB/s, 10 GB/s links).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/bench_timing.h"
#include "io/model_loader.h"
#include "partition/partition.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_partition MODEL DEVICES.json [--repeat N]\n");
    return 2;
  }
  int repeat = 3;
  std::string mode = "size_based";
  for (int a = 3; a + 1 < argc; a += 2) {
    if (std::strcmp(argv[a], "--repeat") == 0)
      repeat = std::atoi(argv[a + 1]);
    else if (std::strcmp(argv[a], "--mode") == 0)
      mode = argv[a + 1];
  }
  std::optional<cleave::partition::PartitionMode> parsedMode = cleave::partition::kPartitionModes.parse(mode);
  if (!parsedMode || *parsedMode == cleave::partition::PartitionMode::AotBased) {
    std::fprintf(stderr, "bench_partition: --mode is one of %s except aot_based\n",
                 cleave::partition::kPartitionModes.choices().c_str());
    return 2;
  }
  bool reference = std::strcmp(argv[2], "--reference") == 0;
  auto start = std::chrono::steady_clock::now();
  auto graph = cleave::io::loadModel(argv[1]);
  double loadSeconds = cleave::bench::secondsSince(start);
  if (!graph) {
    std::fprintf(stderr, "bench_partition: %s\n", graph.error().message().c_str());
    return 1;
  }
  cleave::Expected<cleave::partition::DeviceSet> devices = cleave::partition::DeviceSet{};
  if (reference) {
    std::int64_t total = 0;
    auto sizes = cleave::partition::computeNodeSizes(*graph);
    for (std::uint32_t n = 0; n < graph->numNodes(); ++n)
      total += sizes[cleave::ir::NodeId{n}].totalBytes;
    for (int i = 0; i < 4; ++i)
      devices->devices.push_back({"dev_" + std::to_string(i), i, total / 4 + total / 8, ""});
  } else {
    devices = cleave::partition::loadDevices(argv[2]);
    if (!devices) {
      std::fprintf(stderr, "bench_partition: %s\n", devices.error().message().c_str());
      return 1;
    }
  }
  double rate = reference ? 1e9 : 1e10;
  cleave::partition::TransferRates rates{rate, &*devices};
  auto latencies = cleave::partition::estimateLatencies(*graph, 1e12, 1e11);
  if (reference)
    for (std::uint32_t n = 0; n < graph->numNodes(); ++n)
      latencies[cleave::ir::NodeId{n}] = {1.0, 2.0};
  cleave::partition::PartitionOptions options;
  options.mode = *parsedMode;
  options.latencies = latencies;
  options.timeResult = false; // the critical path is timed on its own below
  options.transferRateBytesPerSec = rate;
  std::vector<double> partitionTimes, pathTimes;
  std::size_t partitions = 0;
  double critical = 0;
  for (int i = 0; i < repeat; ++i) {
    start = std::chrono::steady_clock::now();
    auto report = cleave::partition::partitionGraph(*graph, *devices, options);
    partitionTimes.push_back(cleave::bench::secondsSince(start));
    if (!report) {
      std::fprintf(stderr, "bench_partition: %s\n", report.error().message().c_str());
      return 1;
    }
    const cleave::partition::PartitionResult* result = &report->result;
    partitions = result->partitions.size();
    start = std::chrono::steady_clock::now();
    auto perPartition = cleave::partition::partitionLatencies(*graph, result->plan, latencies);
    std::vector<std::vector<std::int64_t>> ids;
    for (const auto& info : result->partitions)
      ids.push_back(info.logicalDeviceIds);
    auto path = cleave::partition::criticalPath(*graph, result->plan, ids, perPartition,
                                                cleave::partition::computeNodeSizes(*graph), rates);
    pathTimes.push_back(cleave::bench::secondsSince(start));
    critical = path ? path->latencySec : -1;
  }
  std::sort(partitionTimes.begin(), partitionTimes.end());
  std::sort(pathTimes.begin(), pathTimes.end());
  std::printf("mode=%s nodes=%u load_s=%.3f partition_best_s=%.6f partition_median_s=%.6f critical_path_best_s=%.6f "
              "partitions=%zu critical_path=%.4f\n",
              mode.c_str(), graph->numNodes(), loadSeconds, partitionTimes.front(), partitionTimes[partitionTimes.size() / 2],
              pathTimes.front(), partitions, critical);
  return 0;
}
