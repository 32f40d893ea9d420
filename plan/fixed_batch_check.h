// plan/fixed_batch_check.h - whether a plan's submodels can run on rows other than the batch their
// model was exported with (microbatches, a training batch of another size): io/fixed_batch.h's
// analysis applied to every submodel file of a plan.
//
// Guarantees: a plan whose inputs have no static dim 0 (a dynamic batch) passes without reading
// any submodel; otherwise each submodel's inputs of the exported rows are freed and the first
// node (in plan order) whose constant shape holds them is named, with its submodule, in one line;
// a submodel whose analysis fails (onnx's inference cannot type it) counts as unknown, not held.
// Complexity: io/fixed_batch.h's, once per submodel file, for static-batch plans only.
#pragma once

#include <cstdint>
#include <string>

#include "base/expected.h"
#include "plan/plan_file.h"

namespace cleave::plan {

// The static dim 0 of the plan's graph inputs (the batch the model was exported with), or -1
// when any of them leaves it open.
std::int64_t exportedRows(const PlanFile& plan);

// InvalidArgument naming the submodule and the node when the exported batch is held in a constant;
// `why` says what needs other rows ("4 microbatches of 4 rows").
Status checkRowsCanChange(const std::string& dir, const PlanFile& plan, const std::string& why);
// The same for a run in `microbatches` (`cleave run --pipeline` / `--distributed`): nothing to
// check for one.
Status checkMicrobatchesCanRun(const std::string& dir, const PlanFile& plan, std::int64_t microbatches);

} // namespace cleave::plan
