// runtime/distributed/launcher.h - `cleave launch`: torchrun for one host (run it on each host of
// many). Starts `processes` ranks of `command`, each with RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, CLEAVE_DIST_TIMEOUT and (unless already set)
// OMP_NUM_THREADS = cores / ranks, in its own process group. "Cores" are the CPUs this process may
// run on (its affinity: a launcher started under taskset or a container's cpuset shares those).
// With bindCores, rank r runs on its own share of them, cores [r * c, (r + 1) * c) for c = cores /
// ranks (DeepSpeed's --bind_cores_to_rank), so two ranks' compute never shares a core. Opt-in:
// on a 2-core machine it measured no gain beyond the noise for 1f1b training (0.96x and 1.03x) and a 3.5x slower
// ping-pong, since each rank's Gloo thread then shares the rank's core.
//
// Guarantees: every line a rank prints reaches this process's stdout / stderr whole, prefixed
// "[rank R] "; when a rank fails (non-zero exit or a signal) the others get SIGTERM, then SIGKILL
// after a grace period, and the result names the first rank that failed with its last stderr
// line; no child outlives launch(). "cleave" as the command's program is this executable.
// Complexity: one poll loop over 2 pipes per rank; O(output) work.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "base/expected.h"

namespace cleave::runtime::distributed {

struct LaunchOptions {
  int processes = 1;      // ranks on this host
  int nodes = 1, nodeRank = 0;
  std::string masterAddr = "127.0.0.1";
  std::uint16_t masterPort = 29500;
  std::chrono::seconds timeout{300};  // CLEAVE_DIST_TIMEOUT for the ranks
  std::chrono::seconds grace{5};      // SIGTERM to SIGKILL
  bool bindCores = false;             // each rank on its own share of the cores
  // torchrun's elastic restart: when a rank fails, every rank is stopped and all are started
  // again, up to maxRestarts times (not after an interrupt, nor after a usage error, exit 2,
  // which would only repeat). Ranks see TORCHELASTIC_RESTART_COUNT (0 on the first start) and
  // TORCHELASTIC_MAX_RESTARTS, as under torchrun; `cleave train --checkpoint-dir D` resumes
  // from D's last complete checkpoint when restarted.
  int maxRestarts = 0;
};

struct LaunchResult {
  int exitCode = 0;      // 0, or the first failed rank's status (1 when it died by a signal)
  int failedRank = -1;
  std::string failure;   // "rank 1 exited with status 1: <its last stderr line>"
};

// Starts the ranks and supervises them, restarting them all as options.maxRestarts allows (each
// restart announced on `err`). A Usage error when bindCores leaves a rank no core.
Expected<LaunchResult> launch(const LaunchOptions& options, const std::vector<std::string>& command,
                              std::ostream& out, std::ostream& err);

} // namespace cleave::runtime::distributed
