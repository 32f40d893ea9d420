#include "runtime/distributed/environment.h"

#include <cstdlib>

#include "runtime/engine/device_wing.h"

namespace cleave::runtime::distributed {

namespace {
Expected<long long> integerVariable(const std::function<const char*(const char*)>& lookup, const char* name,
                                    long long low, long long high, const char* fallback = nullptr) {
  const char* text = lookup(name);
  if (!text || !*text) {
    if (fallback)
      text = fallback;
    else
      return Error(ErrorCode::InvalidArgument) << name << " is not set (run under `cleave launch`, or set RANK, "
                                               << "WORLD_SIZE, MASTER_ADDR and MASTER_PORT)";
  }
  char* end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  if (*end != '\0' || value < low || value > high)
    return Error(ErrorCode::InvalidArgument) << name << "='" << text << "': expected an integer in [" << low << ", "
                                             << high << "]";
  return value;
}
} // namespace

Expected<DistributedEnv> readDistributedEnv(const std::function<const char*(const char*)>& lookup) {
  auto get = lookup ? lookup : [](const char* name) -> const char* { return std::getenv(name); };
  DistributedEnv env;
  CLEAVE_TRY(long long worldSize, integerVariable(get, "WORLD_SIZE", 1, 1 << 20));
  CLEAVE_TRY(long long rank, integerVariable(get, "RANK", 0, 1 << 20));
  if (rank >= worldSize)
    return Error(ErrorCode::InvalidArgument) << "RANK=" << rank << " is not below WORLD_SIZE=" << worldSize;
  CLEAVE_TRY(long long localRank, integerVariable(get, "LOCAL_RANK", 0, 1 << 20, "0"));
  CLEAVE_TRY(long long localWorldSize, integerVariable(get, "LOCAL_WORLD_SIZE", 0, 1 << 20, "0"));
  CLEAVE_TRY(long long port, integerVariable(get, "MASTER_PORT", 1, 65535));
  CLEAVE_TRY(long long timeout, integerVariable(get, "CLEAVE_DIST_TIMEOUT", 1, 1 << 20, "300"));
  CLEAVE_TRY(long long checkOrder, integerVariable(get, "CLEAVE_DIST_CHECK_ORDER", 0, 1, "0"));
  const char* addr = get("MASTER_ADDR");
  if (!addr || !*addr)
    return Error(ErrorCode::InvalidArgument) << "MASTER_ADDR is not set (run under `cleave launch`)";
  env.rank = static_cast<int>(rank);
  env.worldSize = static_cast<int>(worldSize);
  env.localRank = static_cast<int>(localRank);
  env.localWorldSize = static_cast<int>(localWorldSize);
  env.masterAddr = addr;
  env.masterPort = static_cast<std::uint16_t>(port);
  env.timeout = std::chrono::seconds(timeout);
  env.checkChannelOrder = checkOrder == 1;
  return env;
}

int rankGpu(const DistributedEnv& env, int gpus) { return gpus > 0 ? env.localRank % gpus : 0; }

std::string rankBackend(const std::string& backend, const DistributedEnv* env) {
  // Only a base name (no index) is the rank's to choose; the wing that owns the name counts its devices.
  const std::optional<int> devices = env ? devicesNamedBy(backend) : std::nullopt;
  if (!devices || *devices == 0)
    return backend;
  return backend + ":" + std::to_string(rankGpu(*env, *devices));
}

} // namespace cleave::runtime::distributed
