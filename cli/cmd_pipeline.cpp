// cli/cmd_pipeline.cpp - `cleave pipeline MODEL (--stages N --policy P | --split-spec FILE) -o DIR
// [--multi-use M] [--loss NAME] [--json]`: pipeline stages, parameter placement, skip
// connections and the backward plan; writes plan.json, one model per stage and reports.
#include <sstream>

#include "base/file_io.h"
#include "cli/commands.h"
#include "cli/output_options.h"
#include "io/model_loader.h"
#include "pipeline/stages.h"
#include "report/json_util.h"

namespace cleave::cli {

int runPipeline(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Cut a model into pipeline stages: by split markers (pipe_split / cleave::PipeSplit), a split "
               "spec, or a balancing policy; place parameters, route skip connections, plan the backward pass.",
               "cleave pipeline"};
  OutputDirectoryFlags output;
  std::string path, specPath, policyName = "equal_nodes", balanceName = "latency", multiUse = "replicate", loss;
  pipeline::PipelineOptions options;
  bool json = false, planOnly = false;
  app.add_option("MODEL", path, "ONNX file or FX-graph JSON")->required();
  app.add_option("--stages", options.stages, "number of stages (with --policy)");
  app.add_option("--policy", policyName, "equal_nodes, equal_params, equal_flops, equal_latency or optimal")
      ->capture_default_str();
  app.add_option("--balance", balanceName, "what optimal balances: nodes, params, flops or latency")
      ->capture_default_str();
  app.add_option("--stage-memory", options.stageMemoryBytes, "optimal: bytes a stage may hold (params + outputs)");
  app.add_option("--split-spec", specPath, "split points (JSON: split_spec / split_before / split_after)");
  app.add_option("--multi-use", multiUse, "a parameter several stages read: replicate or transmit")
      ->capture_default_str();
  app.add_option("--loss", loss, "the output that is the loss (default: an output named 'loss', if any)");
  addOutputDirectory(app, output, "output directory");
  app.add_flag("--plan-only", planOnly, "write plan.json and reports, no stage models");
  app.add_flag("--json", json, "print a JSON summary");
  if (int code = parseArguments(app, args, out, err); code >= 0)
    return code;
  std::optional<pipeline::Policy> policy = pipeline::parsePolicy(policyName);
  std::optional<pipeline::Balance> balance = pipeline::parseBalance(balanceName);
  if (!policy || !balance || (multiUse != "replicate" && multiUse != "transmit")) {
    err << "cleave pipeline: usage error: "
        << (!policy ? "unknown --policy '" + policyName + "'"
            : !balance ? "unknown --balance '" + balanceName + "'"
                       : "--multi-use is replicate or transmit, not '" + multiUse + "'")
        << "\n";
    return kExitUsage;
  }
  if (!specPath.empty() && options.stages > 0) {
    err << "cleave pipeline: usage error: --stages and --split-spec exclude each other\n";
    return kExitUsage;
  }
  options.policy = *policy;
  options.balance = *balance;
  options.multiUse = multiUse == "transmit" ? pipeline::MultiUse::Transmit : pipeline::MultiUse::Replicate;
  if (!loss.empty())
    options.loss = loss;
  if (!specPath.empty()) {
    Expected<std::string> text = readFile(specPath);
    if (!text)
      return reportError("cleave pipeline", text.error(), err);
    Expected<pipeline::SplitSpec> spec = pipeline::parseSplitSpec(*text, specPath);
    if (!spec)
      return reportError("cleave pipeline", spec.error(), err);
    options.spec = std::move(*spec);
  }
  Expected<std::optional<OutputDirectory>> opened = openOutputDirectory(output, {path, specPath});
  if (!opened)
    return reportError("cleave pipeline", opened.error(), err);
  std::optional<OutputDirectory> outDir = std::move(*opened);
  Expected<ir::Graph> graph = io::loadModel(path);
  if (!graph)
    return reportError("cleave pipeline", graph.error(), err);
  Expected<pipeline::PipelinePlan> plan = pipeline::planPipeline(*graph, options);
  if (!plan)
    return reportError("cleave pipeline", plan.error(), err);
  report::Json summary = pipeline::pipelineJson(*graph, *plan, options);
  std::ostringstream text;
  text << "stages: " << plan->stats.size() << " (" << summary["policy"].get<std::string>() << "), imbalance "
       << plan->imbalance << " (max / mean " << summary["balance"].get<std::string>() << ")\n";
  for (const report::Json& stage : summary["stages"])
    text << "  " << stage["name"].get<std::string>() << ": " << stage["nodes"].size() << " node(s), params "
         << formatBytes(stage["param_bytes"].get<std::int64_t>()) << ", " << stage["flops"].get<double>()
         << " FLOPs, in " << formatBytes(stage["activation_in_bytes"].get<std::int64_t>()) << ", out "
         << formatBytes(stage["activation_out_bytes"].get<std::int64_t>()) << "\n";
  for (const report::Json& tie : summary["tie_groups"])
    text << "tie group: " << tie["parameter"].get<std::string>() << " on stages " << tie["stages"].dump() << "\n";
  for (const report::Json& skip : summary["skip_connections"])
    text << "skip connection: " << skip["value"].get<std::string>() << " from stage " << skip["from"].get<int>()
         << " to stage " << skip["to"].get<int>() << "\n";
  text << "loss: " << (summary["loss"].is_null() ? std::string("none (inference)") : summary["loss"].get<std::string>())
       << "\n";
  if (outDir) {
    plan::MaterializeOptions materializeOptions;
    materializeOptions.writeSubmodels = !planOnly;
    materializeOptions.transmitted = plan->transmitted;
    materializeOptions.extraFiles = {{"report.txt", text.str()}, {"report.json", report::dumpJson(summary)}};
    report::Json extra;
    extra["pipeline"] = summary;
    if (Status written = plan::materialize(*graph, plan->plan, path, *outDir, extra, materializeOptions); !written)
      return reportError("cleave pipeline", written.error(), err);
  }
  out << (json ? report::dumpJson(summary) : text.str());
  return kExitOk;
}

} // namespace cleave::cli
