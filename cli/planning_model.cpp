#include "cli/planning_model.h"

#include "io/model_loader.h"
#include "simplify/shape_folding.h"

namespace cleave::cli {

void addSimplifyFlag(CLI::App& app, bool& noSimplify) {
  app.add_flag("--no-simplify", noSimplify,
               "plan on the ONNX model as read: do not fold its static shape arithmetic to constants first "
               "(cleave simplify does that folding alone)");
}

void addTrainableFlags(CLI::App& app, io::FixedPatterns& patterns) {
  app.add_option("--frozen", patterns.frozen,
                 "hold the ONNX model's floating tensors whose names match these glob patterns fixed in training "
                 "(as requires_grad=False does); a pattern that matches none is an error");
  app.add_option("--trainable", patterns.trainable,
                 "train only the ONNX model's floating tensors whose names match these glob patterns; the others "
                 "are held fixed");
}

namespace {
// The fold plan for what holds for any batch: computed on the model read with its rows free,
// whose ids are the plain read's. Nothing when that read fails or does not line up.
Expected<simplify::FoldPlan> planForAnyRows(const std::string& path, const ir::Graph& graph,
                                            const io::FixedPatterns& fixedPatterns) {
  io::OnnxReadOptions options;
  options.freeRows = true;
  options.fixedPatterns = fixedPatterns;
  CLEAVE_TRY(ir::Graph free, io::loadModel(path, options));
  if (free.numNodes() != graph.numNodes() || free.numValues() != graph.numValues())
    return Error(ErrorCode::Unsupported) << "the model read with a free batch has other nodes";
  return simplify::foldToFixedPoint(free);
}
} // namespace

Expected<PlanningModel> loadPlanningModel(const std::string& path, const PlanningLoad& load) {
  CLEAVE_TRY(ir::Graph graph, io::loadModel(path, {.fixedPatterns = load.fixedPatterns}));
  if (!load.simplify || graph.modelInfo().format != ir::SourceFormat::Onnx)
    return PlanningModel{std::move(graph), std::nullopt, std::nullopt, ""};
  simplify::FoldPlan plan;
  if (load.anyRows) {
    Expected<simplify::FoldPlan> planned = planForAnyRows(path, graph, load.fixedPatterns);
    if (!planned)
      return PlanningModel{std::move(graph), std::nullopt, std::nullopt,
                           "not folded: reading it with a free batch failed: " + planned.error().message()};
    plan = std::move(*planned);
  } else {
    plan = simplify::foldToFixedPoint(graph);
  }
  if (!plan.changes())
    return PlanningModel{std::move(graph), std::nullopt, std::nullopt, ""};
  CLEAVE_TRY(ir::Graph folded, simplify::applyFoldPlanRetyped(graph, plan));
  PlanningModel model{std::move(folded), std::nullopt, report::foldingReport(plan, load.anyRows), ""};
  if (load.keepUnfolded)
    model.unfolded = std::move(graph);
  return model;
}

std::string withFoldingLine(const PlanningModel& model, std::string text) {
  if (model.folding)
    return report::foldingText(*model.folding) + text;
  if (!model.skipped.empty())
    return "simplify: " + model.skipped + "\n" + text;
  return text;
}

} // namespace cleave::cli
