// runtime/distributed/rank_run.h - this rank's part of `cleave run PLAN --distributed` under
// `cleave launch`, from the request to its measured record: the environment read, the rank's
// backend chosen by the rule training follows (environment.h: rankBackend), only its submodules
// lowered, inputs read or drawn alike on every rank, a schedule's forwards (or GPipe order) run
// over c10d (distributed_run.h), and what it ran timed.
// Guarantees: a bad request fails on every rank alike before any rank connects (usage errors as
// ErrorCode::Usage); rank 0 returns the plan's outputs, the other ranks none.
// Complexity: distributed_run.h's, plus loading the rank's submodules once.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "base/expected.h"
#include "pipeline/schedule.h"
#include "runtime/engine/optimizations.h"
#include "runtime/engine/tensors.h"
#include "runtime/model/run_times.h"
#include "runtime/model/host_backend.h"

namespace cleave::runtime::distributed {

struct RankRunRequest {
  std::string plan;                 // a plan directory
  std::string backend = kHostBackend; // the accelerator side's (a GPU: each rank on its LOCAL_RANK's)
  Optimizations optimizations;
  std::string inputsPath;                   // "" : random inputs from `seed` and `dims`
  std::map<std::string, std::int64_t> dims; // symbolic input dims of random inputs
  std::uint64_t seed = 0;
  std::int64_t microbatches = 1;
  std::optional<pipeline::ScheduleKind> schedule; // none: GPipe order
};

struct RankRunResult {
  RankRun run;
  TensorMap outputs;                    // rank 0's
  std::vector<std::string> outputNames; // the plan's, in order
};

// Fails: usage (a training schedule), what the environment, loading, the inputs, connecting and
// the run fail with.
Expected<RankRunResult> runRank(const RankRunRequest& request);

} // namespace cleave::runtime::distributed
