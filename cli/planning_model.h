// cli/planning_model.h - the model split, partition and pipeline plan on: an ONNX model with its
// shape arithmetic folded to constants (simplify/shape_folding.h) unless --no-simplify; an FX
// graph exactly as read, so the conformance with torch's splitter stays exact.
//
// Guarantees: the planned graph has the model's inputs and outputs and computes the same thing;
// `anyRows` folds only what holds for every batch (the model is also read with its batch free,
// io/onnx.h's freeRows), so a pipeline's microbatches still run; folding that cannot apply (that
// read fails) leaves the model as read, with the reason in `skipped`.
// Complexity: one read of the model (two with anyRows) plus the folding pass (linear).
#pragma once

#include <optional>
#include <string>

#include "base/expected.h"
#include "cli/commands.h"
#include "io/onnx.h"
#include "ir/graph.h"
#include "report/simplify_report.h"

namespace cleave::cli {

// --no-simplify
void addSimplifyFlag(CLI::App& app, bool& noSimplify);
// --frozen PATTERN... / --trainable PATTERN... (ONNX models: io/fixed_parameters.h)
void addTrainableFlags(CLI::App& app, io::FixedPatterns& patterns);

struct PlanningModel {
  ir::Graph graph;                              // what to plan on
  std::optional<ir::Graph> unfolded;            // the model as read, when asked for and folding changed it
  std::optional<report::FoldingReport> folding; // set when folding ran and changed the model
  std::string skipped;                          // why folding did not run on an ONNX model (empty: it did)
};

struct PlanningLoad {
  bool simplify = true;
  bool anyRows = false;      // fold only what holds for any batch
  bool keepUnfolded = false; // also hold the model as read (split counts what folding saved)
  io::FixedPatterns fixedPatterns; // --frozen / --trainable
};

Expected<PlanningModel> loadPlanningModel(const std::string& path, const PlanningLoad& load);

// Prepends the folding line (when folding changed the model) to a report's text.
std::string withFoldingLine(const PlanningModel& model, std::string text);

} // namespace cleave::cli
