// cli/cmd_split.cpp - `cleave split MODEL --profile P -o DIR [...]`: accelerator/CPU split.
// Options, one call to split::splitGraph, one render (report/split_report.h); --preview with
// --backend or --dump-inputs also run the model, in the runtime library (cli/runtime_library.h).
#include "base/json.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/planning_model.h"
#include "cli/runtime_library.h"
#include "io/model_loader.h"
#include "report/split_report.h"
#include "split/preview.h"
#include "split/shape_prologue.h"
#include "split/splitter.h"

namespace cleave::cli {

namespace {
struct SplitFlags {
  std::string path, profilePath;
  OutputDirectoryFlags output;
  split::SplitOptions options;
  bool json = false, preview = false, dumpInputs = false, lowerAndRun = false, dot = false, noSimplify = false,
       noShapePrologue = false;
  double pcieGiBps = 100.0;
  RuntimeOptions runtime;
  runtime::AllClose tolerance = runtime::kCutTolerance;
};

void describe(CLI::App& app, SplitFlags& flags) {
  app.description("Split a model into as few accelerator and CPU submodules as possible (torch.fx splitter "
                  "semantics) and write the plan, one standalone model per submodule, and reports. FX graphs and "
                  ".pt2 programs get a node -> submodule assignment instead of submodels.");
  split::SplitOptions& options = flags.options;
  addModelInput(app, flags.path);
  app.add_option("--profile", flags.profilePath, "operator-support profile (JSON)")->required();
  CLI::Option* output = addPlanOutput(app, flags.output);
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
  addSimplifyFlag(app, flags.noSimplify);
  app.add_flag("--no-shape-prologue", flags.noShapePrologue,
               "leave on the CPU the integer shape arithmetic (of dynamic dims) that only feeds acc nodes' shape "
               "operands, instead of keeping it with their acc submodule as a host prologue (ONNX)");
  app.add_flag("--preview", flags.preview, "report per acc subgraph sizes, PCIe-bound max QPS and the bottleneck");
  app.add_option("--pcie-gbps", flags.pcieGiBps, "PCIe bandwidth for --preview, GiB/s")
      ->capture_default_str()
      ->check(kFinite)
      ->check(CLI::PositiveNumber);
  app.add_flag("--dump-inputs", flags.dumpInputs,
               "write submodule_inputs.json: each submodule's inputs captured from a run of the model "
               "on --inputs FILE or random inputs (--seed)")
      ->needs(output);
  app.add_flag("--dot", flags.dot, "also write split.dot (Graphviz) of the cut into the output directory")
      ->needs(output);
  addRuntimeOptions(app, flags.runtime);
  app.add_option("--rtol", flags.tolerance.rtol, "--preview --backend: relative tolerance")
      ->capture_default_str()
      ->check(kFinite);
  app.add_option("--atol", flags.tolerance.atol, "--preview --backend: absolute tolerance")
      ->capture_default_str()
      ->check(kFinite);
  addJsonFlag(app, flags.json);
  app.callback([&app, &flags] {
    flags.lowerAndRun = flags.preview && app.count("--backend") > 0;
    if (app.count("--rtol") == 0) // mixed precision: its half type's bound (runtime/model/tolerance.h)
      flags.tolerance.rtol = runtime::cutToleranceFor(false, flags.runtime.optimizations.precision).rtol;
  });
}

Json splitSettings(const support::Profile& profile, const split::SplitOptions& options) {
  Json extra;
  extra["profile"] = profile.name();
  extra["settings"] = {{"min_acc_size", options.minAccSize}, {"max_acc_splits", options.maxSplits},
                       {"skip_fusion", options.skipFusion}, {"allow_non_tensor", options.allowNonTensor},
                       {"extend_acc", options.extendAcc},
                       {"move_non_tensor_boundary", options.moveNonTensorBoundary}};
  return extra;
}

struct ProfiledSplit {
  split::SplitResult result;
  split::ShapePrologue prologue;
  std::size_t submodulesWithoutPrologue = 0; // the same split with the profile's decisions alone
};

Expected<ProfiledSplit> splitWithProfile(const ir::Graph& graph, const support::Profile& profile,
                                         const SplitFlags& flags) {
  split::SplitDecisions decided = split::decideForSplit(graph, profile, !flags.noShapePrologue);
  CLEAVE_TRY(split::SplitResult result, split::splitGraph(graph, decided.decisions, flags.options));
  ProfiledSplit profiled{std::move(result), std::move(decided.prologue)};
  if (!profiled.prologue.nodes.empty()) { // what the prologue saved
    split::SplitDecisions alone = split::decideForSplit(graph, profile, false);
    CLEAVE_TRY(split::SplitResult without, split::splitGraph(graph, alone.decisions, flags.options));
    profiled.submodulesWithoutPrologue = without.plan.submodules.size();
  }
  return profiled;
}

Status splitModel(const SplitFlags& flags, std::ostream& out, std::ostream&) {
  if (flags.output.path.empty() && !flags.preview)
    return usageError() << "-o DIR is required (or --preview alone)";
  CLEAVE_TRY(std::optional<OutputDirectory> outDir,
             openOutputDirectory(flags.output, {flags.path, flags.profilePath, flags.runtime.inputsPath}));
  CLEAVE_TRY(support::Profile profile, support::Profile::load(flags.profilePath));
  CLEAVE_TRY(PlanningModel model, loadPlanningModel(flags.path, {.simplify = !flags.noSimplify, .keepUnfolded = true}));
  const ir::Graph& graph = model.graph;
  CLEAVE_TRY(ProfiledSplit profiled, splitWithProfile(graph, profile, flags));
  const split::SplitResult& result = profiled.result;
  if (model.folding && model.unfolded) { // what folding saved: the same split of the model as read
    CLEAVE_TRY(ProfiledSplit unfolded, splitWithProfile(*model.unfolded, profile, flags));
    model.folding->submodulesUnfolded = unfolded.result.plan.submodules.size();
    model.folding->submodulesFolded = result.plan.submodules.size();
    model.unfolded.reset();
  }
  std::vector<plan::Boundary> boundaries = plan::computeBoundaries(graph, result.plan);
  split::SplitPreview preview = split::previewSplit(graph, result.plan, boundaries, flags.pcieGiBps * double(1ull << 30));
  report::SplitReport splitReport{result, preview, flags.lowerAndRun ? flags.runtime.backend : "", {},
                                  model.folding ? &*model.folding : nullptr, &profiled.prologue,
                                  profiled.submodulesWithoutPrologue};
  std::string submoduleInputs;
  if (flags.lowerAndRun || flags.dumpInputs) {
    CLEAVE_TRY(const RuntimeLibrary* runtime, loadRuntimeLibrary());
    CLEAVE_TRY(SplitRunResult ran, runtime->runSplitModel({graph, result.plan, boundaries, flags.runtime,
                                                           flags.tolerance, flags.lowerAndRun, flags.dumpInputs}));
    splitReport.trials = std::move(ran.trials);
    submoduleInputs = std::move(ran.submoduleInputs);
  }
  std::string summary = report::splitReportJson(graph, splitReport);
  if (outDir) {
    // The JSON is moved into report.json unless --json prints it too.
    PlanReport files{report::splitReportText(graph, splitReport, true), flags.json ? summary : std::move(summary),
                     splitSettings(profile, flags.options)};
    if (flags.dumpInputs)
      files.moreFiles.push_back({"submodule_inputs.json", submoduleInputs});
    if (flags.dot)
      files.moreFiles.push_back({"split.dot", report::splitDot(graph, result.plan)});
    CLEAVE_CHECK(writePlanDirectory(graph, result.plan, flags.path, flags.output, *outDir, std::move(files)));
  }
  if (flags.json)
    out << summary;
  else
    out << report::splitReportText(graph, splitReport, flags.preview);
  return {};
}
} // namespace

const Command kSplitCommand{"split", "split a model into accelerator and CPU submodules",
                            parseThenRun<SplitFlags, describe, splitModel>};

} // namespace cleave::cli
