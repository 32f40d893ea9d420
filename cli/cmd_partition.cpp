// cli/cmd_partition.cpp - `cleave partition MODEL --devices D.json --mode M -o DIR [--json]`.
#include <sstream>

#include "cli/commands.h"
#include "cli/output_options.h"
#include "io/model_loader.h"
#include "base/file_io.h"
#include "partition/aot_and_replicas.h"
#include "partition/cost_aware.h"
#include "partition/kl_based.h"
#include "partition/latency.h"
#include "partition/optimal.h"
#include "partition/sparse_nn.h"
#include "partition/size_based.h"
#include "plan/materialize.h"
#include "report/memory_svg.h"

namespace cleave::cli {

namespace {
report::Json partitionJson(const ir::Graph& graph, const partition::PartitionResult& result,
                           const std::vector<plan::Boundary>& boundaries) {
  report::Json out;
  out["single_partition"] = result.singlePartition;
  report::Json list = report::Json::array();
  for (std::size_t p = 0; p < result.partitions.size(); ++p) {
    const plan::Submodule& sub = result.plan.submodules[p];
    report::Json entry;
    entry["id"] = p;
    entry["name"] = sub.name;
    report::Json nodes = report::Json::array();
    for (ir::NodeId node : sub.nodes)
      nodes.push_back(std::string(graph.name(node)));
    entry["nodes"] = std::move(nodes);
    entry["logical_device_ids"] = result.partitions[p].logicalDeviceIds;
    entry["size_bytes"] = result.partitions[p].usedMemBytes;
    report::Json inputs = report::Json::array(), outputs = report::Json::array();
    for (ir::ValueId value : boundaries[p].inputs)
      inputs.push_back(std::string(graph.valueName(value)));
    for (ir::ValueId value : boundaries[p].outputs)
      outputs.push_back(std::string(graph.valueName(value)));
    entry["inputs"] = std::move(inputs);
    entry["outputs"] = std::move(outputs);
    list.push_back(std::move(entry));
  }
  out["partitions"] = std::move(list);
  return out;
}

// Memory per device: the bytes of the partitions placed on it (replicas count on each device).
std::vector<report::DeviceMemoryRow> memoryPerDevice(const partition::DeviceSet& devices,
                                                     const partition::PartitionResult& result) {
  std::vector<report::DeviceMemoryRow> rows;
  for (const partition::Device& device : devices.devices) {
    report::DeviceMemoryRow row;
    row.label = device.name + " (id " + std::to_string(device.logicalId) + ")";
    row.capacityBytes = device.availableMemBytes;
    for (std::size_t p = 0; p < result.partitions.size(); ++p)
      for (std::int64_t id : result.partitions[p].logicalDeviceIds)
        if (id == device.logicalId)
          row.partitions.push_back({result.plan.submodules[p].name, result.partitions[p].usedMemBytes});
    rows.push_back(std::move(row));
  }
  return rows;
}

const char* const kModes = "size_based, sparse_nn, cost_aware, kl_based, optimal, aot_based";
} // namespace

int runPartition(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Partition a model across devices with memory limits (torch.fx Partitioner "
               "semantics) and write the partition DAG, submodels and reports.",
               "cleave partition"};
  OutputDirectoryFlags output;
  std::string path, devicesPath, mode = "size_based", latencyPath, aotPath, objective = "critical_path";
  bool json = false, planOnly = false, estimate = false, saturate = false, memorySvg = false;
  double transferRate = 0.0, flops = 1e12, bandwidth = 1e11;
  app.add_option("MODEL", path, "ONNX file or FX-graph JSON")->required();
  app.add_option("--devices", devicesPath, "devices (JSON: logical ids and available memory)")->required();
  app.add_option("--mode", mode, std::string("partition mode: ") + kModes)->capture_default_str();
  app.add_option("--objective", objective, "optimal: critical_path or bottleneck")->capture_default_str();
  app.add_option("--aot", aotPath, "aot_based: node -> partition and partition -> logical devices (JSON)");
  app.add_flag("--saturate-host", saturate, "replicate the partitions onto idle devices (torch's saturate_host)");
  addOutputDirectory(app, output, "output directory");
  app.add_option("--latency", latencyPath, "node latencies (JSON: node -> mem_latency_sec, computer_latency_sec)");
  app.add_flag("--estimate", estimate, "estimate node latencies from FLOPs and bytes (--flops, --bandwidth)");
  app.add_option("--transfer-rate", transferRate,
                 "bytes/s between devices for the critical path (default: the devices file's, else 1)");
  app.add_option("--flops", flops, "FLOP/s for --estimate")->capture_default_str();
  app.add_option("--bandwidth", bandwidth, "memory bytes/s for --estimate")->capture_default_str();
  app.add_flag("--plan-only", planOnly, "write plan.json and reports, no submodels");
  app.add_flag("--memory-svg", memorySvg, "also write memory.svg (memory per device) into the output directory");
  app.add_flag("--json", json, "print a JSON summary");
  if (int code = parseArguments(app, args, out, err); code >= 0)
    return code;
  if (mode != "size_based" && mode != "aot_based" && mode != "sparse_nn" && mode != "cost_aware" &&
      mode != "kl_based" && mode != "optimal") {
    err << "cleave partition: usage error: unknown mode '" << mode << "' (modes: " << kModes << ")\n";
    return kExitUsage;
  }
  bool costModes = mode == "cost_aware" || mode == "kl_based" || mode == "optimal";
  if (costModes && latencyPath.empty() && !estimate) {
    err << "cleave partition: usage error: mode " << mode
        << " needs node latencies: --latency FILE or --estimate\n";
    return kExitUsage;
  }
  if (objective != "critical_path" && objective != "bottleneck") {
    err << "cleave partition: usage error: --objective is critical_path or bottleneck, not '" << objective << "'\n";
    return kExitUsage;
  }
  if (memorySvg && output.path.empty()) {
    err << "cleave partition: usage error: --memory-svg needs -o DIR\n";
    return kExitUsage;
  }
  if ((mode == "aot_based") != !aotPath.empty()) {
    err << "cleave partition: usage error: --aot FILE goes with --mode aot_based (and only with it)\n";
    return kExitUsage;
  }
  Expected<std::optional<OutputDirectory>> opened =
      openOutputDirectory(output, {path, devicesPath, latencyPath, aotPath});
  if (!opened)
    return reportError("cleave partition", opened.error(), err);
  std::optional<OutputDirectory> outDir = std::move(*opened);
  Expected<partition::DeviceSet> devices = partition::loadDevices(devicesPath);
  if (!devices)
    return reportError("cleave partition", devices.error(), err);
  Expected<ir::Graph> graph = io::loadModel(path);
  if (!graph)
    return reportError("cleave partition", graph.error(), err);
  bool withLatency = !latencyPath.empty() || estimate;
  IdVector<ir::NodeId, partition::NodeLatency> latencies;
  if (!latencyPath.empty()) {
    Expected<std::string> text = readFile(latencyPath);
    if (!text)
      return reportError("cleave partition", text.error(), err);
    Expected<IdVector<ir::NodeId, partition::NodeLatency>> parsed = partition::parseLatencies(*graph, *text, latencyPath);
    if (!parsed)
      return reportError("cleave partition", parsed.error(), err);
    latencies = std::move(*parsed);
  } else if (estimate) {
    latencies = partition::estimateLatencies(*graph, flops, bandwidth);
  }
  partition::TransferRates rates;
  rates.uniformBytesPerSec = transferRate > 0 ? transferRate
                             : (devices->transferRateBytesPerSec > 0 ? devices->transferRateBytesPerSec : 1.0);
  rates.devices = &*devices;

  Expected<partition::PartitionResult> result = Error(ErrorCode::InvalidArgument);
  if (mode == "aot_based") {
    Expected<std::string> mapping = readFile(aotPath);
    if (!mapping)
      return reportError("cleave partition", mapping.error(), err);
    result = partition::partitionAheadOfTime(*graph, *devices, *mapping, aotPath);
  } else if (mode == "sparse_nn") {
    result = partition::partitionSparseNn(*graph, *devices);
  } else if (mode == "cost_aware") {
    result = partition::partitionCostAware(*graph, *devices, latencies, rates);
  } else if (mode == "kl_based") {
    result = partition::partitionKlBased(*graph, *devices, latencies, rates);
  } else if (mode == "optimal") {
    result = partition::partitionOptimal(*graph, *devices, latencies, rates,
                                         objective == "bottleneck" ? partition::Objective::Bottleneck
                                                                   : partition::Objective::CriticalPath);
  } else {
    result = partition::partitionBySize(*graph, *devices);
  }
  if (!result)
    return reportError("cleave partition", result.error(), err);
  if (saturate)
    partition::saturateHost(*devices, *result);
  std::vector<plan::Boundary> boundaries = plan::computeBoundaries(*graph, result->plan);
  report::Json summary = partitionJson(*graph, *result, boundaries);
  summary["mode"] = mode;
  if (mode == "optimal")
    summary["objective"] = objective;
  std::vector<report::DeviceMemoryRow> memory = memoryPerDevice(*devices, *result);
  report::Json deviceList = report::Json::array();
  for (std::size_t d = 0; d < memory.size(); ++d) {
    std::int64_t used = 0;
    for (const auto& entry : memory[d].partitions)
      used += entry.second;
    deviceList.push_back({{"logical_id", devices->devices[d].logicalId},
                          {"name", devices->devices[d].name},
                          {"available_mem_bytes", devices->devices[d].availableMemBytes},
                          {"used_mem_bytes", used}});
  }
  summary["devices"] = std::move(deviceList);
  if (withLatency) {
    std::vector<partition::PartitionLatency> perPartition = partition::partitionLatencies(*graph, result->plan, latencies);
    std::vector<std::vector<std::int64_t>> deviceIds;
    for (const partition::PartitionInfo& info : result->partitions)
      deviceIds.push_back(info.logicalDeviceIds);
    Expected<partition::CriticalPath> critical = partition::criticalPath(
        *graph, result->plan, deviceIds, perPartition, partition::computeNodeSizes(*graph), rates);
    if (!critical)
      return reportError("cleave partition", critical.error(), err);
    for (std::size_t p = 0; p < perPartition.size(); ++p)
      summary["partitions"][p]["latency_sec"] = {{"overall", perPartition[p].overallSec},
                                                 {"mem", perPartition[p].memSec},
                                                 {"compute", perPartition[p].computeSec}};
    summary["critical_path"] = critical->latencySec;
    summary["critical_path_partitions"] = critical->partitions;
    summary["transfer_rate_bytes_per_sec"] = rates.uniformBytesPerSec;
  }
  std::ostringstream text;
  text << "partitions: " << result->partitions.size() << (result->singlePartition ? " (the model fits one device)" : "")
       << "\n";
  for (const report::Json& entry : summary["partitions"]) {
    text << "  " << entry["name"].get<std::string>() << ": " << entry["nodes"].size() << " node(s), "
         << entry["size_bytes"].get<std::int64_t>() << " bytes, devices " << entry["logical_device_ids"].dump();
    if (entry.contains("latency_sec"))
      text << ", latency " << entry["latency_sec"]["overall"].get<double>() << " s";
    text << "\n";
  }
  text << "memory per device:\n";
  for (const report::Json& entry : summary["devices"])
    text << "  " << entry["name"].get<std::string>() << " (id " << entry["logical_id"].get<std::int64_t>()
         << "): " << entry["used_mem_bytes"].get<std::int64_t>() << " / "
         << entry["available_mem_bytes"].get<std::int64_t>() << " bytes\n";
  if (summary.contains("critical_path"))
    text << "critical path: " << summary["critical_path"].get<double>() << " s through partitions "
         << summary["critical_path_partitions"].dump() << "\n";
  if (outDir) {
    plan::MaterializeOptions options;
    options.writeSubmodels = !planOnly;
    options.extraFiles = {{"report.txt", text.str()}, {"report.json", report::dumpJson(summary)}};
    if (memorySvg)
      options.extraFiles.push_back({"memory.svg", report::renderMemorySvg(memory)});
    report::Json extra;
    extra["mode"] = mode;
    extra["partitions"] = summary["partitions"];
    if (Status written = plan::materialize(*graph, result->plan, path, *outDir, extra, options); !written)
      return reportError("cleave partition", written.error(), err);
  }
  out << (json ? report::dumpJson(summary) : text.str());
  return kExitOk;
}

} // namespace cleave::cli
