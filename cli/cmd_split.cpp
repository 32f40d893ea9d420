// cli/cmd_split.cpp - `cleave split MODEL --profile P -o DIR [...]`: accelerator/CPU split.
#include <sstream>

#include "base/json.h"
#include "cli/commands.h"
#include "cli/output_options.h"
#include "cli/runtime_options.h"
#include "io/model_loader.h"
#include "runtime/lower_and_run.h"
#include "plan/materialize.h"
#include "report/split_report.h"
#include "split/splitter.h"

namespace cleave::cli {

int runSplit(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Split a model into as few accelerator and CPU submodules as possible (torch.fx "
               "splitter semantics) and write the plan, one standalone model per submodule, and "
               "reports. FX graphs get a node -> submodule assignment instead of submodels.",
               "cleave split"};
  std::string path, profilePath;
  OutputDirectoryFlags output;
  split::SplitOptions options;
  bool json = false, planOnly = false, preview = false, dumpInputs = false;
  double pcieGiBps = 100.0;
  RuntimeOptions runtime;
  runtime::Tolerance tolerance;
  app.add_option("MODEL", path, "ONNX file or FX-graph JSON")->required();
  app.add_option("--profile", profilePath, "operator-support profile (JSON)")->required();
  addOutputDirectory(app, output, "output directory");
  app.add_option("--min-acc-size", options.minAccSize, "smallest acc subgraph kept (torch's min_acc_module_size)")
      ->capture_default_str();
  app.add_option("--max-acc-splits", options.maxSplits,
                 "most submodules (acc + cpu) allowed; merges the least valuable acc subgraphs back "
                 "to the CPU until it holds (0: no limit)");
  app.add_flag("--skip-fusion", options.skipFusion, "no fusion groups");
  app.add_flag("--allow-non-tensor", options.allowNonTensor, "allow non-tensor data between acc and cpu");
  app.add_flag("--extend-acc", options.extendAcc,
               "pull acc nodes from earlier submodules into each acc submodule (torch's extend_acc_subgraph)");
  app.add_flag("--move-non-tensor-boundary", options.moveNonTensorBoundary,
               "move non-tensor acc nodes next to their users in another submodule (torch's "
               "move_non_tensor_nodes_on_boundary; useful with --allow-non-tensor)");
  app.add_flag("--plan-only", planOnly, "write plan.json and reports, no submodels");
  app.add_flag("--preview", preview, "report per acc subgraph sizes, PCIe-bound max QPS and the bottleneck");
  app.add_option("--pcie-gbps", pcieGiBps, "PCIe bandwidth for --preview, GiB/s")->capture_default_str();
  app.add_flag("--dump-inputs", dumpInputs,
               "write submodule_inputs.json: each submodule's inputs captured from a run of the model "
               "on --inputs FILE or random inputs (--seed)");
  addRuntimeOptions(app, runtime);
  app.add_option("--rtol", tolerance.rtol, "--preview --backend: relative tolerance")->capture_default_str();
  app.add_option("--atol", tolerance.atol, "--preview --backend: absolute tolerance")->capture_default_str();
  app.add_flag("--json", json, "print a JSON summary");
  if (int code = parseArguments(app, args, out, err); code >= 0)
    return code;
  bool lowerAndRun = preview && app.count("--backend") > 0;
  if (dumpInputs && output.path.empty()) {
    err << "cleave split: usage error: --dump-inputs needs -o DIR\n";
    return kExitUsage;
  }
  if (output.path.empty() && !preview) {
    err << "cleave split: usage error: -o DIR is required (or --preview alone)\n";
    return kExitUsage;
  }
  if (pcieGiBps <= 0) {
    err << "cleave split: usage error: --pcie-gbps must be positive\n";
    return kExitUsage;
  }
  Expected<std::optional<OutputDirectory>> opened =
      openOutputDirectory(output, {path, profilePath, runtime.inputsPath});
  if (!opened)
    return reportError("cleave split", opened.error(), err);
  std::optional<OutputDirectory> outDir = std::move(*opened);
  Expected<support::Profile> profile = support::Profile::load(profilePath);
  if (!profile)
    return reportError("cleave split", profile.error(), err);
  Expected<ir::Graph> graph = io::loadModel(path);
  if (!graph)
    return reportError("cleave split", graph.error(), err);
  IdVector<ir::NodeId, support::Decision> decisions = support::decideAll(*graph, *profile);
  Expected<split::SplitResult> result = split::splitGraph(*graph, decisions, options);
  if (!result)
    return reportError("cleave split", result.error(), err);

  std::vector<plan::Boundary> boundaries = plan::computeBoundaries(*graph, result->plan);
  report::Json summary = report::splitJson(*graph, *result, boundaries,
                                           {.pcieBytesPerSecond = pcieGiBps * double(1ull << 30)});
  // Runs of the model: lower-and-run of each acc subgraph on --backend, captured inputs.
  std::string submoduleInputs;
  if (lowerAndRun || dumpInputs) {
    // Not owning: `graph` outlives every use here.
    std::shared_ptr<const ir::Graph> shared(&*graph, [](const ir::Graph*) {});
    Expected<std::unique_ptr<runtime::Backend>> acc = runtime::makeBackend(runtime.backend, runtime.optimizations);
    Expected<std::unique_ptr<runtime::Backend>> cpu = runtime::makeBackend("aten-cpu", runtime.optimizations);
    if (!acc || !cpu)
      return reportError("cleave split", acc ? cpu.error() : acc.error(), err);
    Expected<runtime::TensorMap> inputs = makeInputs(*graph, runtime);
    if (!inputs)
      return reportError("cleave split", inputs.error(), err);
    Expected<runtime::ReferenceRun> reference = runtime::ReferenceRun::run(shared, **cpu, *inputs);
    if (!reference)
      return reportError("cleave split", reference.error(), err);
    if (dumpInputs) {
      report::Json all = report::Json::object();
      for (std::size_t s = 0; s < boundaries.size(); ++s) {
        Expected<std::string> text = runtime::formatTensorFile(reference->valuesByName(boundaries[s].inputs));
        if (!text)
          return reportError("cleave split", text.error(), err);
        all[result->plan.submodules[s].name] = report::Json::parse(*text);
      }
      submoduleInputs = toJsonText(all) + "\n";
    }
    if (lowerAndRun) {
      report::Json trials = report::Json::array();
      for (const runtime::SubmoduleTrial& trial :
           runtime::tryAccSubmodules(*reference, result->plan, **acc, tolerance)) {
        report::Json entry = {{"submodule", trial.name},
                              {"outcome", runtime::trialOutcomeName(trial.result.outcome)},
                              {"max_abs", trial.result.maxAbs},
                              {"max_rel", trial.result.maxRel}};
        if (!trial.result.passed())
          entry["message"] = trial.result.message;
        if (trial.culprit) {
          entry["culprit"] = {{"node", std::string(reference->graph().name(*trial.culprit))},
                              {"op", reference->graph().target(*trial.culprit)},
                              {"outcome", runtime::trialOutcomeName(trial.culpritResult.outcome)},
                              {"message", trial.culpritResult.message}};
        }
        trials.push_back(std::move(entry));
      }
      summary["lower_and_run"] = {{"backend", runtime.backend}, {"submodules", std::move(trials)}};
    }
  }
  std::ostringstream text;
  report::printSplitText(summary, true, text);
  if (outDir) {
    report::Json extra;
    extra["profile"] = profile->name();
    extra["settings"] = {{"min_acc_size", options.minAccSize}, {"max_acc_splits", options.maxSplits},
                         {"skip_fusion", options.skipFusion}, {"allow_non_tensor", options.allowNonTensor},
                         {"extend_acc", options.extendAcc},
                         {"move_non_tensor_boundary", options.moveNonTensorBoundary}};
    plan::MaterializeOptions materializeOptions;
    materializeOptions.writeSubmodels = !planOnly;
    materializeOptions.extraFiles = {{"report.txt", text.str()}, {"report.json", report::dumpJson(summary)}};
    if (dumpInputs)
      materializeOptions.extraFiles.push_back({"submodule_inputs.json", submoduleInputs});
    if (Status written = plan::materialize(*graph, result->plan, path, *outDir, extra, materializeOptions); !written)
      return reportError("cleave split", written.error(), err);
  }
  if (json)
    out << report::dumpJson(summary);
  else
    report::printSplitText(summary, preview, out);
  return kExitOk;
}

} // namespace cleave::cli
