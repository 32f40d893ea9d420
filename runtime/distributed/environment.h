// runtime/distributed/environment.h - where a rank is, the torchrun way: RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (cleave launch sets them), plus
// CLEAVE_DIST_TIMEOUT (seconds, default 300) for rendezvous and every receive, and
// CLEAVE_DIST_CHECK_ORDER (0 or 1, default 0): a channel matched in order carries each message's
// tag and checks it (communicator.h; what tests run with).
//
// Guarantee: a missing or malformed variable, or an inconsistent set (RANK >= WORLD_SIZE, a port
// outside 1-65535), is one InvalidArgument naming the variable and what it holds.
// Complexity: O(1).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "base/expected.h"

namespace cleave::runtime::distributed {

struct DistributedEnv {
  int rank = 0, worldSize = 1, localRank = 0;
  int localWorldSize = 0; // ranks on this host; 0 when LOCAL_WORLD_SIZE is not set (unknown)
  std::string masterAddr;
  std::uint16_t masterPort = 0;
  std::chrono::seconds timeout{300};
  bool checkChannelOrder = false;

  // Whether every rank runs on this host (LOCAL_WORLD_SIZE = WORLD_SIZE); false when unknown.
  bool oneHost() const { return localWorldSize == worldSize; }
};

// `lookup` returns a variable's value or null (std::getenv by default).
Expected<DistributedEnv> readDistributedEnv(const std::function<const char*(const char*)>& lookup = {});

// The one rule that maps a rank to its GPU: LOCAL_RANK modulo the `gpus` its process sees
// (CUDA_VISIBLE_DEVICES may show fewer than the ranks of a host). The nccl transport's device
// and rankBackend's are this one.
int rankGpu(const DistributedEnv& env, int gpus);

// The backend a rank runs on: under a launcher (`env` set), a wing's indexed base name alone
// (`aten-cuda`) is `base:G` for G = rankGpu of the devices that wing sees; any other name
// (aten-cuda:N included) as given. Ask after the wing is loaded (makeBackend's backendDevice loads
// it): a wing not loaded yet answers nothing, and libtorch answers "how many GPUs" once.
std::string rankBackend(const std::string& backend, const DistributedEnv* env);

} // namespace cleave::runtime::distributed
