#include "report/partition_report.h"

#include <sstream>

#include "base/strings.h"

namespace cleave::report {
using partition::PartitionReport;

namespace {
Json namesOf(const ir::Graph& graph, const std::vector<ir::ValueId>& values) {
  Json names = Json::array();
  for (ir::ValueId value : values)
    names.push_back(std::string(graph.valueName(value)));
  return names;
}

Json partitionJson(const ir::Graph& graph, const PartitionReport& report, std::size_t p) {
  const plan::Submodule& sub = report.result.plan.submodules[p];
  Json entry;
  entry["id"] = p;
  entry["name"] = sub.name;
  Json nodes = Json::array();
  for (ir::NodeId node : sub.nodes)
    nodes.push_back(std::string(graph.name(node)));
  entry["nodes"] = std::move(nodes);
  entry["logical_device_ids"] = report.result.partitions[p].logicalDeviceIds;
  entry["size_bytes"] = report.result.partitions[p].usedMemBytes;
  entry["inputs"] = namesOf(graph, report.boundaries[p].inputs);
  entry["outputs"] = namesOf(graph, report.boundaries[p].outputs);
  if (report.timing) {
    const partition::PartitionLatency& latency = report.timing->perPartition[p];
    entry["latency_sec"] = {{"overall", latency.overallSec}, {"mem", latency.memSec}, {"compute", latency.computeSec}};
  }
  return entry;
}
} // namespace

Json deviceBackendsJson(const PartitionReport& report) {
  Json backends = Json::object();
  for (const partition::DeviceUsage& device : report.devices)
    if (!device.backend.empty())
      backends[std::to_string(device.logicalId)] = device.backend;
  return backends;
}

Json partitionReportJson(const ir::Graph& graph, const PartitionReport& report) {
  Json out;
  out["single_partition"] = report.result.singlePartition;
  Json list = Json::array();
  for (std::size_t p = 0; p < report.result.partitions.size(); ++p)
    list.push_back(partitionJson(graph, report, p));
  out["partitions"] = std::move(list);
  out["mode"] = std::string(partition::kPartitionModes.name(report.mode));
  if (report.mode == partition::PartitionMode::Optimal)
    out["objective"] = std::string(partition::kObjectives.name(report.objective));
  Json devices = Json::array();
  for (const partition::DeviceUsage& device : report.devices) {
    devices.push_back({{"logical_id", device.logicalId},
                       {"name", device.name},
                       {"available_mem_bytes", device.availableMemBytes},
                       {"used_mem_bytes", device.usedMemBytes}});
    if (!device.backend.empty())
      devices.back()["backend"] = device.backend;
  }
  out["devices"] = std::move(devices);
  if (report.timing) {
    out["critical_path"] = report.timing->criticalPath.latencySec;
    out["critical_path_partitions"] = report.timing->criticalPath.partitions;
    out["transfer_rate_bytes_per_sec"] = report.timing->transferRateBytesPerSec;
  }
  return out;
}

std::string partitionReportText(const PartitionReport& report) {
  const partition::PartitionResult& result = report.result;
  std::ostringstream text;
  text << "partitions: " << result.partitions.size() << (result.singlePartition ? " (the model fits one device)" : "")
       << "\n";
  for (std::size_t p = 0; p < result.partitions.size(); ++p) {
    text << "  " << result.plan.submodules[p].name << ": " << result.plan.submodules[p].nodes.size() << " node(s), "
         << formatBytes(result.partitions[p].usedMemBytes) << ", devices "
         << Json(result.partitions[p].logicalDeviceIds).dump();
    if (report.timing)
      text << ", latency " << report.timing->perPartition[p].overallSec << " s";
    text << "\n";
  }
  text << "memory per device:\n";
  for (const partition::DeviceUsage& device : report.devices)
    text << "  " << device.name << " (id " << device.logicalId << "): " << formatBytes(device.usedMemBytes) << " / "
         << formatBytes(device.availableMemBytes) << "\n";
  if (report.timing)
    text << "critical path: " << report.timing->criticalPath.latencySec << " s through partitions "
         << Json(report.timing->criticalPath.partitions).dump() << "\n";
  return text.str();
}

std::vector<DeviceMemoryRow> partitionMemoryRows(const PartitionReport& report) {
  std::vector<DeviceMemoryRow> rows;
  for (const partition::DeviceUsage& device : report.devices) {
    DeviceMemoryRow row;
    row.label = device.name + " (id " + std::to_string(device.logicalId) + ")";
    row.capacityBytes = device.availableMemBytes;
    for (std::uint32_t p : device.partitions)
      row.partitions.push_back({report.result.plan.submodules[p].name, report.result.partitions[p].usedMemBytes});
    rows.push_back(std::move(row));
  }
  return rows;
}

} // namespace cleave::report
