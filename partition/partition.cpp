#include "partition/partition.h"

#include "partition/aot_and_replicas.h"
#include "partition/cost_aware.h"
#include "partition/kl_based.h"
#include "partition/sparse_nn.h"

namespace cleave::partition {

bool needsLatencies(PartitionMode mode) {
  return mode == PartitionMode::CostAware || mode == PartitionMode::KlBased || mode == PartitionMode::Optimal;
}

namespace {
TransferRates transferRatesOf(const DeviceSet& devices, const PartitionOptions& options) {
  TransferRates rates;
  rates.uniformBytesPerSec = options.transferRateBytesPerSec > 0 ? options.transferRateBytesPerSec
                             : devices.transferRateBytesPerSec > 0 ? devices.transferRateBytesPerSec
                                                                   : 1.0;
  rates.devices = &devices;
  return rates;
}

Expected<PartitionResult> runMode(const ir::Graph& graph, const DeviceSet& devices, const PartitionOptions& options,
                                  const TransferRates& rates) {
  if (needsLatencies(options.mode) && !options.latencies)
    return Error(ErrorCode::InvalidArgument) << "mode " << kPartitionModes.name(options.mode)
                                             << " needs node latencies";
  switch (options.mode) {
  case PartitionMode::SizeBased: return partitionBySize(graph, devices);
  case PartitionMode::SparseNn: return partitionSparseNn(graph, devices);
  case PartitionMode::CostAware: return partitionCostAware(graph, devices, *options.latencies, rates);
  case PartitionMode::KlBased: return partitionKlBased(graph, devices, *options.latencies, rates);
  case PartitionMode::Optimal: return partitionOptimal(graph, devices, *options.latencies, rates, options.objective);
  case PartitionMode::AotBased:
    if (options.aotMapping.empty())
      return Error(ErrorCode::InvalidArgument) << "mode aot_based needs a node -> partition mapping";
    return partitionAheadOfTime(graph, devices, options.aotMapping, options.aotSource);
  }
  return Error(ErrorCode::InvalidArgument) << "unknown partition mode";
}

std::vector<DeviceUsage> usageOf(const DeviceSet& devices, const PartitionResult& result) {
  std::vector<DeviceUsage> usage;
  for (const Device& device : devices.devices) {
    DeviceUsage row{device.logicalId, device.name, device.availableMemBytes, 0, {}, device.backend};
    for (std::uint32_t p = 0; p < result.partitions.size(); ++p)
      for (std::int64_t id : result.partitions[p].logicalDeviceIds)
        if (id == device.logicalId) {
          row.partitions.push_back(p);
          row.usedMemBytes += result.partitions[p].usedMemBytes;
        }
    usage.push_back(std::move(row));
  }
  return usage;
}

// Each partition's submodule names its devices (first the one it runs on, then its replicas) and
// takes the smallest of their memories as its limit (plan::verify checks it).
void placeOnDevices(const DeviceSet& devices, PartitionResult& result) {
  for (std::size_t p = 0; p < result.partitions.size(); ++p) {
    plan::Submodule& submodule = result.plan.submodules[p];
    submodule.devices = result.partitions[p].logicalDeviceIds;
    submodule.memoryLimitBytes = -1;
    for (std::int64_t id : submodule.devices) {
      std::size_t d = devices.indexOf(id);
      if (d < devices.devices.size() &&
          (submodule.memoryLimitBytes < 0 || devices.devices[d].availableMemBytes < submodule.memoryLimitBytes))
        submodule.memoryLimitBytes = devices.devices[d].availableMemBytes;
    }
  }
}

Expected<PartitionTiming> timingOf(const ir::Graph& graph, const PartitionResult& result,
                                   const IdVector<ir::NodeId, NodeLatency>& latencies, const TransferRates& rates) {
  PartitionTiming timing;
  timing.perPartition = partitionLatencies(graph, result.plan, latencies);
  std::vector<std::vector<std::int64_t>> deviceIds;
  for (const PartitionInfo& info : result.partitions)
    deviceIds.push_back(info.logicalDeviceIds);
  CLEAVE_TRY(timing.criticalPath, criticalPath(graph, result.plan, deviceIds, timing.perPartition,
                                               computeNodeSizes(graph), rates));
  timing.transferRateBytesPerSec = rates.uniformBytesPerSec;
  return timing;
}
} // namespace

Expected<PartitionReport> partitionGraph(const ir::Graph& graph, const DeviceSet& devices,
                                         const PartitionOptions& options) {
  TransferRates rates = transferRatesOf(devices, options);
  PartitionReport report;
  report.mode = options.mode;
  report.objective = options.objective;
  CLEAVE_TRY(report.result, runMode(graph, devices, options, rates));
  if (options.saturateHost)
    report.result = saturateHost(devices, std::move(report.result));
  placeOnDevices(devices, report.result);
  report.boundaries = plan::computeBoundaries(graph, report.result.plan);
  report.devices = usageOf(devices, report.result);
  if (options.latencies && options.timeResult) {
    CLEAVE_TRY(PartitionTiming timing, timingOf(graph, report.result, *options.latencies, rates));
    report.timing = std::move(timing);
  }
  return report;
}

} // namespace cleave::partition
