// cli/cmd_partition.cpp - `cleave partition MODEL --devices D.json --mode M -o DIR [--json]`:
// options, one call to partition::partitionGraph, one render (report/partition_report.h).
#include "base/file_io.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/planning_model.h"
#include "io/model_loader.h"
#include "partition/partition.h"
#include "report/partition_report.h"

namespace cleave::cli {

namespace {
struct PartitionFlags {
  std::string path, devicesPath, latencyPath, aotPath;
  OutputDirectoryFlags output;
  partition::PartitionOptions options;
  bool json = false, estimate = false, memorySvg = false, noSimplify = false;
  double flops = 1e12, bandwidth = 1e11;
};

void describe(CLI::App& app, PartitionFlags& flags) {
  app.description("Partition a model across devices with memory limits (torch.fx Partitioner semantics) and write "
                  "the partition DAG, submodels and reports.");
  addModelInput(app, flags.path);
  app.add_option("--devices", flags.devicesPath, "devices (JSON: logical ids and available memory; optional per device: profile, kind, backend, the runtime backend its partitions run on)")->required();
  addEnumOption(app, "--mode", flags.options.mode, partition::kPartitionModes, "partition mode");
  addEnumOption(app, "--objective", flags.options.objective, partition::kObjectives, "what optimal minimizes");
  app.add_option("--aot", flags.aotPath, "aot_based: node -> partition and partition -> logical devices (JSON)");
  app.add_flag("--saturate-host", flags.options.saturateHost,
               "replicate the partitions onto idle devices (torch's saturate_host)");
  CLI::Option* output = addPlanOutput(app, flags.output);
  addSimplifyFlag(app, flags.noSimplify);
  CLI::Option* latency =
      app.add_option("--latency", flags.latencyPath, "node latencies (JSON: node -> mem_latency_sec, computer_latency_sec)");
  app.add_flag("--estimate", flags.estimate, "estimate node latencies from FLOPs and bytes (--flops, --bandwidth)")
      ->excludes(latency);
  app.add_option("--transfer-rate", flags.options.transferRateBytesPerSec,
                 "bytes/s between devices for the critical path (default: the devices file's, else 1)")
      ->check(kFinite)
      ->check(CLI::PositiveNumber);
  app.add_option("--flops", flags.flops, "FLOP/s for --estimate")
      ->capture_default_str()
      ->check(kFinite)
      ->check(CLI::PositiveNumber);
  app.add_option("--bandwidth", flags.bandwidth, "memory bytes/s for --estimate")
      ->capture_default_str()
      ->check(kFinite)
      ->check(CLI::PositiveNumber);
  app.add_flag("--memory-svg", flags.memorySvg, "also write memory.svg (memory per device) into the output directory")
      ->needs(output);
  addJsonFlag(app, flags.json);
}

// Node latencies from --latency FILE or --estimate; none otherwise.
Status loadLatencies(const ir::Graph& graph, const PartitionFlags& flags, partition::PartitionOptions& options) {
  if (!flags.latencyPath.empty()) {
    CLEAVE_TRY(std::string text, readFile(flags.latencyPath));
    CLEAVE_TRY(options.latencies, partition::parseLatencies(graph, text, flags.latencyPath));
  } else if (flags.estimate) {
    options.latencies = partition::estimateLatencies(graph, flags.flops, flags.bandwidth);
  }
  return {};
}

Status partitionModel(const PartitionFlags& flags, std::ostream& out, std::ostream&) {
  if (partition::needsLatencies(flags.options.mode) && flags.latencyPath.empty() && !flags.estimate)
    return usageError() << "mode " << partition::kPartitionModes.name(flags.options.mode)
                        << " needs node latencies: --latency FILE or --estimate";
  if ((flags.options.mode == partition::PartitionMode::AotBased) != !flags.aotPath.empty())
    return usageError() << "--aot FILE goes with --mode aot_based (and only with it)";
  CLEAVE_TRY(std::optional<OutputDirectory> outDir,
             openOutputDirectory(flags.output, {flags.path, flags.devicesPath, flags.latencyPath, flags.aotPath}));
  CLEAVE_TRY(partition::DeviceSet devices, partition::loadDevices(flags.devicesPath));
  // --latency and --aot name the nodes of the model as read, so it is planned as read.
  const bool namesNodes = !flags.latencyPath.empty() || !flags.aotPath.empty();
  CLEAVE_TRY(PlanningModel model, loadPlanningModel(flags.path, {.simplify = !flags.noSimplify && !namesNodes}));
  const ir::Graph& graph = model.graph;
  partition::PartitionOptions options = flags.options;
  CLEAVE_CHECK(loadLatencies(graph, flags, options));
  if (!flags.aotPath.empty()) {
    CLEAVE_TRY(options.aotMapping, readFile(flags.aotPath));
    options.aotSource = flags.aotPath;
  }
  CLEAVE_TRY(partition::PartitionReport result, partition::partitionGraph(graph, devices, options));
  Json summary = report::partitionReportJson(graph, result);
  if (model.folding)
    summary["simplify"] = report::foldingJson(*model.folding);
  PlanReport files{withFoldingLine(model, report::partitionReportText(result)), dumpJson(summary)};
  files.planExtra["mode"] = summary["mode"];
  // Where cleave run lowers each partition: its device's backend (runtime/model/cut_model.h).
  if (Json backends = report::deviceBackendsJson(result); !backends.empty())
    files.planExtra["device_backends"] = std::move(backends);
  if (flags.memorySvg)
    files.moreFiles.push_back({"memory.svg", report::renderMemorySvg(report::partitionMemoryRows(result))});
  return writePlanAndPrint(graph, result.result.plan, flags.path, flags.output, outDir, std::move(files), flags.json,
                           out);
}
} // namespace

const Command kPartitionCommand{"partition", "partition a model across devices with memory limits",
                                parseThenRun<PartitionFlags, describe, partitionModel>};

} // namespace cleave::cli
