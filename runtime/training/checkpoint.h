// runtime/training/checkpoint.h - training checkpoints a run resumes from exactly: every rank's
// trained tensors, its optimizer's state (SGD momentum buffers; AdamW moments and step counts),
// the CPU generator's state, the step, and the data position: what the data is (its sampler and
// seed included) and the rows read (a step's rows follow from its index: training_data.h), so a
// resumed run reads exactly the rows the uninterrupted run would.
//
// Layout of a checkpoint folder D (one every rank can see: one machine, or a shared file system,
// as torch.distributed.checkpoint's file system writer needs):
//   D/step-00000004/manifest.json   written last: the step, the ranks, the run's identity, the data position
//   D/step-00000004/rank-R.json     rank R's tensors (name, dtype, shape) in its optimizer's order
//   D/step-00000004/rank-R.npz      their values ("param.I"), optimizer state ("state.I.NAME"), "rng"
// A step is written whole or not at all: every rank writes into D/step-K.partial, the caller
// joins the ranks (a collective), and rank 0 alone then writes the manifest and renames the
// folder into place. Only a folder with its manifest is a checkpoint; a partial one is ignored.
// Once step K is in place, older checkpoints (and partial folders up to K) are removed; nothing
// else in D is touched: only folders named step-N holding cleave's files are ever removed.
// Guarantees: a rank restored from a checkpoint holds the same tensors and optimizer state, byte
// for byte, as when it was written, so a resumed run continues exactly as the run that never
// stopped; a checkpoint of another model, plan, batch, optimizer or schedule is refused in one
// line naming what differs. A plan's checkpoint resumes on another rank count or replica layout
// too (resharded: each rank finds its tensors by name in whichever rank file holds them), exactly
// as long as no stage draws random numbers (each rank's generator comes from the rank of its
// number, or rank 0's). Writing is deterministic (the same state gives the
// same bytes).
// Complexity: linear in the rank's tensors' bytes; listing D is O(entries).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>

#include "base/expected.h"

namespace cleave::runtime {

// What a checkpoint must agree with to be resumed: recorded in its manifest.
struct CheckpointIdentity {
  int ranks = 1;
  int pipelineRanks = 1;  // ranks per pipeline replica (ranks / pipelineRanks replicas; each rank writes its own part)
  std::int64_t batch = 1;
  std::string model;      // "the whole model" or "the plan's stages submod_0, submod_1"
  std::string optimizer;  // kOptimizerKinds' name
  std::string lrSchedule; // LrSchedule::describe()
  std::string data;       // TrainingData::describe(): the rows' source and sampler, without paths
};

// One rank's training state, as its trainer holds it: its trained tensors, named uniquely on the
// rank, in the order its optimizer was made with, and that optimizer.
// The name of the placeholder a rank without parameters trains (not looked for when resharding).
inline constexpr const char* kNoParameters = "(no parameters)";

struct RankTrainingState {
  std::vector<std::pair<std::string, at::Tensor>> parameters;
  torch::optim::Optimizer* optimizer = nullptr;
};

// D/step-K (`partial`: D/step-K.partial).
std::string checkpointFolder(const std::string& dir, std::int64_t step, bool partial = false);

// The step of the last complete checkpoint in `dir`; none when `dir` has none (or is missing).
// Fails: InvalidArgument (`dir` is not a folder).
Expected<std::optional<std::int64_t>> latestCheckpoint(const std::string& dir);

// Rank `rank`'s part of step `step`'s checkpoint, into the partial folder (created).
Status writeRankCheckpoint(const std::string& dir, std::int64_t step, int rank, const RankTrainingState& state);

// Rank 0, once every rank's writeRankCheckpoint succeeded: the manifest, the rename into place,
// and the older checkpoints removed.
Status completeCheckpoint(const std::string& dir, std::int64_t step, const CheckpointIdentity& identity);

// Restores rank `rank`'s state from the checkpoint of `step` in `dir` after checking it was
// written by a run like this one (its layout of ranks may differ: resharded by name); returns the
// number of ranks that wrote it. Fails: InvalidArgument naming what differs (identity, a tensor's
// name, dtype or shape, the optimizer's state, a tensor no rank file holds), ParseError / NotFound
// (a damaged checkpoint).
Expected<int> readRankCheckpoint(const std::string& dir, std::int64_t step, int rank, const CheckpointIdentity& identity,
                          RankTrainingState& state);

} // namespace cleave::runtime
