#include "runtime/distributed/checkpoint_schedule.h"

#include <cstdlib>
#include <string_view>

namespace cleave::runtime::distributed {

bool CheckpointSchedule::after(std::int64_t done, std::int64_t steps) const {
  if (folder().empty())
    return false;
  return done == steps || (stopAfter && done == *stopAfter) || (every > 0 && done % every == 0);
}

Expected<std::int64_t> resumeStep(const CheckpointSchedule& schedule, std::int64_t steps, int rank,
                                  const CheckpointIdentity& identity, RankTrainingState state, std::ostream& err) {
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const bool restarted = restarts && std::string_view(restarts) != "0";
  const std::string dir = !schedule.resumeDir.empty() ? schedule.resumeDir
                          : restarted                 ? schedule.checkpointDir
                                                      : std::string();
  if (dir.empty())
    return 0;
  CLEAVE_TRY(std::optional<std::int64_t> latest, latestCheckpoint(dir));
  if (!latest && schedule.resumeDir.empty())
    return 0;
  if (!latest)
    return Error(ErrorCode::InvalidArgument) << "--resume " << dir << ": no complete checkpoint there";
  if (*latest > steps || (schedule.stopAfter && *schedule.stopAfter <= *latest))
    return Error(ErrorCode::InvalidArgument) << "--resume " << dir << ": its checkpoint is of step " << *latest
                                             << ", and this run stops at step " << schedule.lastStep(steps);
  Expected<int> read = readRankCheckpoint(dir, *latest, rank, identity, state);
  if (!read)
    return std::move(read.error().withContext("--resume " + dir));
  if (rank == 0) {
    err << "resumed from " << checkpointFolder(dir, *latest) << " (step " << *latest << ")";
    if (*read != identity.ranks)
      err << ", resharded from " << *read << " rank(s) to " << identity.ranks;
    err << "\n";
  }
  return *latest;
}

Status saveCheckpoint(const CheckpointSchedule& schedule, Communicator& comm, std::int64_t done,
                      const RankTrainingState& state, const CheckpointIdentity& identity) {
  const std::string& dir = schedule.folder();
  Status written = writeRankCheckpoint(dir, done, comm.rank(), state);
  at::Tensor failures = at::full({1}, written ? 0.0 : 1.0, at::kDouble);
  CLEAVE_CHECK(comm.allReduceSum(failures));
  if (!written)
    return written;
  if (failures.item<double>() > 0)
    return Error(ErrorCode::IoError) << "the checkpoint of step " << done << ": another rank could not write its part";
  return comm.rank() == 0 ? completeCheckpoint(dir, done, identity) : Status{};
}

} // namespace cleave::runtime::distributed
