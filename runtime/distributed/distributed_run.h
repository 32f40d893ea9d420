// runtime/distributed/distributed_run.h - a cut model (plan.json directory: pipeline stages,
// partitions or split submodules) run across ranks: submodule i lives on rank i % world size
// (the model's LoadedPlan placement, pipeline::stageRank) and is lowered only there; messages
// follow the plan's value routes (runtime/model/loaded_plan.h); inputs are split into microbatches (runtime/model/microbatch.h) and each
// microbatch goes through the submodules in plan order. A rank runs its forwards in GPipe's
// order (microbatch by microbatch), or in a pipeline schedule's (its F actions, e.g. interleaved:
// several microbatches through one stage before the next stage on the same rank).
//
// A value crosses ranks once per microbatch, straight from the rank that makes it to each rank
// that reads it (skip connections included, in either direction of the rank order); values on
// the same rank are handed over in memory. The plan's outputs are sent to rank 0, which merges
// the microbatches and returns them; other ranks return nothing.
// Guarantees: the outputs equal the single-process `cleave run PLAN --pipeline --microbatches M`
// bit for bit (same kernels, same microbatches) at the same intra-op thread count, in any order.
// It cannot deadlock: sends never wait, and a receive waits only for a forward of an earlier
// submodule on the same microbatch, which its rank's order reaches first (GPipe: by construction;
// a schedule: the validated schedule's forwards keep that order, and dropping its backward
// actions only removes waits).
// Messages whose shape the plan determines (plan_shapes.h) travel without a shape header; others
// (data-dependent shapes) carry one each.
// Complexity: per microbatch, the submodules' runs plus one message per (value, reading rank).
#pragma once

#include <string>

#include "base/expected.h"
#include "runtime/model/backend.h"
#include "runtime/model/cut_model.h"
#include "runtime/distributed/communicator.h"
#include "runtime/distributed/plan_shapes.h"
#include "runtime/engine/tensors.h"
#include "pipeline/schedule.h"

namespace cleave::runtime::distributed {

struct DistributedRunResult {
  TensorMap outputs;                 // on rank 0 only
  std::vector<std::string> ownSteps; // the submodules this rank ran
};

// The plan with only this rank's submodules lowered.
Expected<CutModel> loadRankModel(const std::string& planDir, int rank, int worldSize, const Backend& acc,
                                 const Backend& cpu);
// `schedule` (none: GPipe order) must be for the plan's submodules, the microbatches and the ranks.
// `shapes` (the plan's value types; none: a header with every message) gives the messages whose
// shape the plan determines their shape in advance, so they travel without a header.
Expected<DistributedRunResult> runDistributed(CutModel& model, const TensorMap& inputs, std::int64_t microbatches,
                                              Communicator& comm, const pipeline::Schedule* schedule = nullptr,
                                              const PlanShapes* shapes = nullptr);

} // namespace cleave::runtime::distributed
