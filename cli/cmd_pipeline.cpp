// cli/cmd_pipeline.cpp - `cleave pipeline MODEL (--stages N --policy P | --split-spec FILE) -o DIR
// [--multi-use M] [--loss NAME] [--microbatches M] [--json]`: options, one call to pipeline::planPipeline, one
// render (report/pipeline_report.h); writes plan.json, one model per stage and the reports.
#include "base/file_io.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/planning_model.h"
#include "io/fixed_batch.h"
#include "io/model_loader.h"
#include "report/pipeline_report.h"

namespace cleave::cli {

namespace {
struct PipelineFlags {
  std::string path, specPath, loss;
  OutputDirectoryFlags output;
  pipeline::PipelineOptions options;
  std::int64_t microbatches = 1; // the run it is planned for: checks that the batch can be split
  bool json = false, noSimplify = false;
  io::FixedPatterns fixedPatterns;
};

void describe(CLI::App& app, PipelineFlags& flags) {
  app.description("Cut a model into pipeline stages: by split markers (pipe_split / cleave::PipeSplit), a split "
                  "spec, or a balancing policy; place parameters, route skip connections, plan the backward pass.");
  addModelInput(app, flags.path);
  CLI::Option* stages = app.add_option("--stages", flags.options.stages, "number of stages (with --policy)")
                            ->check(CLI::Range(1u, 1u << 20));
  addEnumOption(app, "--policy", flags.options.policy, pipeline::kPolicies, "how --stages are balanced");
  addEnumOption(app, "--balance", flags.options.balance, pipeline::kBalances, "what optimal balances");
  app.add_option("--stage-memory", flags.options.stageMemoryBytes, "optimal: bytes a stage may hold (params + outputs)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--split-spec", flags.specPath, "split points (JSON: split_spec / split_before / split_after)")
      ->excludes(stages);
  addEnumOption(app, "--multi-use", flags.options.multiUse, pipeline::kMultiUses,
                "a parameter several stages read");
  app.add_option("--loss", flags.loss, "the output that is the loss (default: an output named 'loss', if any)");
  app.add_option("--microbatches", flags.microbatches,
                 "the microbatches the plan will run: a model whose export fixed the batch in a constant shape "
                 "is refused, naming the node")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  addPlanOutput(app, flags.output);
  addSimplifyFlag(app, flags.noSimplify);
  addTrainableFlags(app, flags.fixedPatterns);
  addJsonFlag(app, flags.json);
}

Status pipelineModel(const PipelineFlags& flags, std::ostream& out, std::ostream&) {
  pipeline::PipelineOptions options = flags.options;
  if (!flags.loss.empty())
    options.loss = flags.loss;
  if (!flags.specPath.empty()) {
    CLEAVE_TRY(std::string text, readFile(flags.specPath));
    CLEAVE_TRY(options.spec, pipeline::parseSplitSpec(text, flags.specPath));
  }
  CLEAVE_TRY(std::optional<OutputDirectory> outDir, openOutputDirectory(flags.output, {flags.path, flags.specPath}));
  // Folds only what holds for any batch, so microbatches run; a split spec names the nodes of the
  // model as read, so it is planned as read.
  CLEAVE_TRY(PlanningModel model,
             loadPlanningModel(flags.path, {.simplify = !flags.noSimplify && flags.specPath.empty(),
                                            .anyRows = true,
                                            .fixedPatterns = flags.fixedPatterns}));
  const ir::Graph& graph = model.graph;
  if (flags.microbatches > 1 && graph.modelInfo().format == ir::SourceFormat::Onnx) {
    // An analysis that fails (onnx's inference cannot type the model) leaves it unknown, not held.
    Expected<io::FixedBatch> fixed = io::findFixedBatch(flags.path);
    if (fixed && !fixed->batchIsFree())
      return Error(ErrorCode::InvalidArgument) << flags.path << ": " << flags.microbatches
                                               << " microbatches cannot run: " << io::describeFixedBatch(*fixed);
  }
  CLEAVE_TRY(pipeline::PipelinePlan plan, pipeline::planPipeline(graph, options));
  Json summary = report::pipelineReportJson(graph, plan, options);
  if (model.folding)
    summary["simplify"] = report::foldingJson(*model.folding);
  else if (!model.skipped.empty())
    summary["simplify"] = {{"skipped", model.skipped}};
  PlanReport files{withFoldingLine(model, report::pipelineReportText(graph, plan, options)), dumpJson(summary)};
  files.planExtra["pipeline"] = summary;
  files.transmitted = plan.transmitted;
  return writePlanAndPrint(graph, plan.plan, flags.path, flags.output, outDir, std::move(files), flags.json, out);
}
} // namespace

const Command kPipelineCommand{"pipeline", "cut a model into pipeline stages; parameters, skip connections, backward plan",
                               parseThenRun<PipelineFlags, describe, pipelineModel>};

} // namespace cleave::cli
