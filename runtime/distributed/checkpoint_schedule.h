// runtime/distributed/checkpoint_schedule.h - when a training run checkpoints, which step it
// resumes from, and how its ranks save one step's checkpoint together (the files themselves:
// runtime/training/checkpoint.h).
//
// Guarantees: a checkpoint is taken after the last step, at --stop-after and every `every` steps,
// into `folder()`; a save is whole on every rank or absent (each rank writes its part, an
// all-reduce of their failures, then rank 0 completes it); a resume takes the last complete
// checkpoint of --resume's folder or, in a run the launcher restarted
// (TORCHELASTIC_RESTART_COUNT > 0), of the checkpoint folder (none there yet: from the start).
// Complexity: O(1) to decide; a save or resume is the checkpoint files' I/O plus one all-reduce.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "runtime/distributed/communicator.h"
#include "runtime/training/checkpoint.h"

namespace cleave::runtime::distributed {

// A run of `steps` steps (--steps) checkpoints by this schedule.
struct CheckpointSchedule {
  std::string checkpointDir, resumeDir; // --checkpoint-dir, --resume
  std::int64_t every = 0;               // --checkpoint-every; 0: at the end and --stop-after only
  std::optional<std::int64_t> stopAfter;
  // Where checkpoints go: --checkpoint-dir, else --resume's folder ("" : nowhere).
  const std::string& folder() const { return checkpointDir.empty() ? resumeDir : checkpointDir; }
  // The step a run of `steps` stops after (counted from 1).
  std::int64_t lastStep(std::int64_t steps) const { return stopAfter.value_or(steps); }
  // Whether step `done` (counted from 1) of a run of `steps` ends with a checkpoint.
  bool after(std::int64_t done, std::int64_t steps) const;
};

// The step to start from: 0, or that of the checkpoint resumed, whose state `state` then holds;
// rank 0 says on `err` where it resumed from. Fails: InvalidArgument (no complete checkpoint in
// --resume's folder, one past this run's last step), what reading it fails with.
Expected<std::int64_t> resumeStep(const CheckpointSchedule& schedule, std::int64_t steps, int rank,
                                  const CheckpointIdentity& identity, RankTrainingState state, std::ostream& err);

// Collective: step `done`'s checkpoint, into schedule.folder(). Fails: IoError (this rank's part,
// or another rank's could not be written).
Status saveCheckpoint(const CheckpointSchedule& schedule, Communicator& comm, std::int64_t done,
                      const RankTrainingState& state, const CheckpointIdentity& identity);

} // namespace cleave::runtime::distributed
