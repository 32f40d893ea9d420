// plan/materialize.h - turn a CutPlan into files: one standalone model per submodule, plan.json,
// and (for FX graphs) the node -> submodule assignment that tools/cleave_fx.py applies with
// torch's own split_by_tags. Shared by split, partition and pipeline.
//
// A submodule's inputs are the values it reads that are produced outside it (graph inputs or
// other submodules' outputs), in value order; its outputs are the values it produces that a
// later submodule or the graph output reads, in value order. Parameters are copied into every
// submodule that uses them (only those), so each ONNX submodel is standalone.
// Output directories are written under a temporary name and renamed when complete.
// Complexity: O(V + E) for the boundaries, plus the bytes written.
#pragma once

#include <string>
#include <vector>

#include "base/expected.h"
#include "base/output_directory.h"
#include "ir/graph.h"
#include "plan/plan.h"
#include "plan/plan_file.h"
#include "base/json.h"

namespace cleave::plan {

struct Boundary {
  std::vector<ir::ValueId> inputs, outputs;
};

// Per submodule, in plan order. Parameters are copied into each submodule that reads them
// unless `transmitted` routes them (see MaterializeOptions).
std::vector<Boundary> computeBoundaries(const ir::Graph& graph, const CutPlan& plan,
                                        const std::vector<std::pair<ir::ValueId, std::uint32_t>>& transmitted = {});

// A standalone graph of one submodule (ONNX-writable when the source graph was ONNX). `types`,
// when given, replaces the source graph's value types (shape propagation).
[[nodiscard]] Expected<ir::Graph> extractSubmodule(const ir::Graph& graph, const CutPlan& plan,
                                                   const std::vector<Boundary>& boundaries,
                                                   std::uint32_t submodule,
                                                   const IdVector<ir::ValueId, ir::ValueType>* types = nullptr);

// What plan.json says of this plan (plan/plan_file.h writes it). `extra` is kept at the top level
// (settings, summary of the pass).
PlanFile describePlan(const ir::Graph& graph, const CutPlan& plan, const std::vector<Boundary>& boundaries,
                      const std::string& modelPath, const Json& extra, bool withFiles);

struct MaterializeOptions {
  bool writeSubmodels = true;          // false: plan.json and reports only (--plan-only)
  // Parameters one submodule owns and sends to the others that read them (pipeline
  // --multi-use transmit): (parameter value, owner submodule). Readers take it as an input; the
  // owner lists it among its outputs.
  std::vector<std::pair<ir::ValueId, std::uint32_t>> transmitted;
  std::vector<std::pair<std::string, std::string>> extraFiles; // (file name, contents)
};

// Writes plan.json, submodels (ONNX: <submodule>.onnx; FX: assignment.json) and the extra files
// (reports) into `out`, then commits it (whole or not at all; base/output_directory.h). Fails:
// IoError (unwritable), InvalidArgument (the directory changed under the run), Unsupported (ONNX
// submodels of an FX graph are never attempted: FX writes the assignment instead).
[[nodiscard]] Status materialize(const ir::Graph& graph, const CutPlan& plan,
                                 const std::string& modelPath, OutputDirectory& out,
                                 const Json& extra, const MaterializeOptions& options);


} // namespace cleave::plan
