// cli/cmd_partition.cpp - `cleave partition MODEL --devices D.json --mode M -o DIR [--json]`.
#include <sstream>

#include "cli/commands.h"
#include "io/model_loader.h"
#include "base/file_io.h"
#include "partition/aot_and_replicas.h"
#include "partition/latency.h"
#include "partition/sparse_nn.h"
#include "partition/size_based.h"
#include "plan/materialize.h"

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
} // namespace

int runPartition(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Partition a model across devices with memory limits (torch.fx Partitioner "
               "semantics) and write the partition DAG, submodels and reports.",
               "cleave partition"};
  std::string path, devicesPath, outDir, mode = "size_based", latencyPath, aotPath;
  bool json = false, planOnly = false, estimate = false, saturate = false;
  double transferRate = 0.0, flops = 1e12, bandwidth = 1e11;
  app.add_option("MODEL", path, "ONNX file or FX-graph JSON")->required();
  app.add_option("--devices", devicesPath, "devices (JSON: logical ids and available memory)")->required();
  app.add_option("--mode", mode, "partition mode (this build: size_based, sparse_nn, aot_based)")->capture_default_str();
  app.add_option("--aot", aotPath, "aot_based: node -> partition and partition -> logical devices (JSON)");
  app.add_flag("--saturate-host", saturate, "replicate the partitions onto idle devices (torch's saturate_host)");
  app.add_option("-o,--output", outDir, "output directory (written atomically)");
  app.add_option("--latency", latencyPath, "node latencies (JSON: node -> mem_latency_sec, computer_latency_sec)");
  app.add_flag("--estimate", estimate, "estimate node latencies from FLOPs and bytes (--flops, --bandwidth)");
  app.add_option("--transfer-rate", transferRate,
                 "bytes/s between devices for the critical path (default: the devices file's, else 1)");
  app.add_option("--flops", flops, "FLOP/s for --estimate")->capture_default_str();
  app.add_option("--bandwidth", bandwidth, "memory bytes/s for --estimate")->capture_default_str();
  app.add_flag("--plan-only", planOnly, "write plan.json and reports, no submodels");
  app.add_flag("--json", json, "print a JSON summary");
  if (int code = parseArguments(app, args, out, err); code >= 0)
    return code;
  if (mode != "size_based" && mode != "aot_based" && mode != "sparse_nn") {
    err << "cleave partition: usage error: mode '" << mode
        << "' is not implemented yet (available: size_based, sparse_nn, aot_based)\n";
    return kExitUsage;
  }
  if ((mode == "aot_based") != !aotPath.empty()) {
    err << "cleave partition: usage error: --aot FILE goes with --mode aot_based (and only with it)\n";
    return kExitUsage;
  }
  Expected<partition::DeviceSet> devices = partition::loadDevices(devicesPath);
  if (!devices)
    return reportError("cleave partition", devices.error(), err);
  Expected<ir::Graph> graph = io::loadModel(path);
  if (!graph)
    return reportError("cleave partition", graph.error(), err);
  Expected<partition::PartitionResult> result = Error(ErrorCode::InvalidArgument);
  if (mode == "aot_based") {
    Expected<std::string> mapping = readFile(aotPath);
    if (!mapping)
      return reportError("cleave partition", mapping.error(), err);
    result = partition::partitionAheadOfTime(*graph, *devices, *mapping, aotPath);
  } else if (mode == "sparse_nn") {
    result = partition::partitionSparseNn(*graph, *devices);
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
  if (!latencyPath.empty() || estimate) {
    IdVector<ir::NodeId, partition::NodeLatency> latencies;
    if (!latencyPath.empty()) {
      Expected<std::string> text = readFile(latencyPath);
      if (!text)
        return reportError("cleave partition", text.error(), err);
      Expected<IdVector<ir::NodeId, partition::NodeLatency>> parsed = partition::parseLatencies(*graph, *text, latencyPath);
      if (!parsed)
        return reportError("cleave partition", parsed.error(), err);
      latencies = std::move(*parsed);
    } else {
      latencies = partition::estimateLatencies(*graph, flops, bandwidth);
    }
    double rate = transferRate > 0 ? transferRate
                                   : (devices->transferRateBytesPerSec > 0 ? devices->transferRateBytesPerSec : 1.0);
    std::vector<partition::PartitionLatency> perPartition = partition::partitionLatencies(*graph, result->plan, latencies);
    std::vector<std::vector<std::int64_t>> deviceIds;
    for (const partition::PartitionInfo& info : result->partitions)
      deviceIds.push_back(info.logicalDeviceIds);
    Expected<partition::CriticalPath> critical = partition::criticalPath(
        *graph, result->plan, deviceIds, perPartition, partition::computeNodeSizes(*graph), rate);
    if (!critical)
      return reportError("cleave partition", critical.error(), err);
    for (std::size_t p = 0; p < perPartition.size(); ++p)
      summary["partitions"][p]["latency_sec"] = {{"overall", perPartition[p].overallSec},
                                                 {"mem", perPartition[p].memSec},
                                                 {"compute", perPartition[p].computeSec}};
    summary["critical_path"] = critical->latencySec;
    summary["critical_path_partitions"] = critical->partitions;
    summary["transfer_rate_bytes_per_sec"] = rate;
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
  if (summary.contains("critical_path"))
    text << "critical path: " << summary["critical_path"].get<double>() << " s through partitions "
         << summary["critical_path_partitions"].dump() << "\n";
  if (!outDir.empty()) {
    plan::MaterializeOptions options;
    options.writeSubmodels = !planOnly;
    options.extraFiles = {{"report.txt", text.str()}, {"report.json", report::dumpJson(summary)}};
    report::Json extra;
    extra["mode"] = mode;
    extra["partitions"] = summary["partitions"];
    if (Status written = plan::materialize(*graph, result->plan, path, outDir, extra, options); !written)
      return reportError("cleave partition", written.error(), err);
  }
  out << (json ? report::dumpJson(summary) : text.str());
  return kExitOk;
}

} // namespace cleave::cli
