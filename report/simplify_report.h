// report/simplify_report.h - what folding did (simplify/shape_folding.h), as `cleave simplify`
// prints it and as split, partition and pipeline report it before their plan.
// Guarantee: text and JSON render the same typed summary; ops are listed in name order, so the
// output is deterministic. Complexity: linear in the op types folded.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "base/json.h"
#include "simplify/shape_folding.h"

namespace cleave::report {

struct FoldingReport {
  std::size_t folded = 0, removed = 0, constants = 0, keptNodes = 0, rounds = 1;
  std::map<std::string, std::size_t> foldedByOp, bypassedByOp;
  bool anyRows = false; // folded only what holds for any batch (pipeline)
  // split: submodules of the cut without folding and with it, when folding changed the model
  std::optional<std::size_t> submodulesUnfolded, submodulesFolded;
};

FoldingReport foldingReport(const simplify::FoldPlan& plan, bool anyRows = false);
// One line ending in a newline: "simplify: folded 84 nodes (...) ... ".
std::string foldingText(const FoldingReport& report);
Json foldingJson(const FoldingReport& report);

} // namespace cleave::report
