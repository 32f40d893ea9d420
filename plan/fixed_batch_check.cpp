#include "plan/fixed_batch_check.h"

#include <filesystem>
#include <set>

#include "io/fixed_batch.h"

namespace cleave::plan {

std::int64_t exportedRows(const PlanFile& plan) {
  std::set<std::string> graphInputs;
  for (const PlanFileSubmodule& sub : plan.submodules)
    for (const PlanFileInput& input : sub.inputs)
      if (input.from == "input")
        graphInputs.insert(input.value);
  std::int64_t rows = -1;
  for (const PlanFileValue& value : plan.values) {
    if (!graphInputs.count(value.name) || value.kind != "tensor" || !value.rankKnown || value.shape.empty())
      continue;
    if (value.shape[0].extent < 0)
      return -1;
    if (rows < 0)
      rows = value.shape[0].extent;
  }
  return rows;
}

Status checkRowsCanChange(const std::string& dir, const PlanFile& plan, const std::string& why) {
  const std::int64_t rows = exportedRows(plan);
  if (rows < 0)
    return {};
  for (const PlanFileSubmodule& sub : plan.submodules) {
    if (sub.file.empty())
      continue;
    Expected<io::FixedBatch> fixed = io::findFixedBatch((std::filesystem::path(dir) / sub.file).string(), rows);
    // A submodel onnx's inference cannot type is not refused here: whether its batch is held is
    // then unknown, and the run itself reports what fails.
    if (fixed && !fixed->batchIsFree())
      return Error(ErrorCode::InvalidArgument) << dir << ": " << why << " cannot run: submodule '" << sub.name
                                               << "': " << io::describeFixedBatch(*fixed);
  }
  return {};
}

Status checkMicrobatchesCanRun(const std::string& dir, const PlanFile& plan, std::int64_t microbatches) {
  if (microbatches <= 1)
    return {};
  return checkRowsCanChange(dir, plan, std::to_string(microbatches) + " microbatches");
}

} // namespace cleave::plan
