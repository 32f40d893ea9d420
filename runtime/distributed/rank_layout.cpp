#include "runtime/distributed/rank_layout.h"

#include <algorithm>
#include <vector>

#include "base/strings.h"
#include "runtime/distributed/transport.h"
#include "runtime/model/backend.h"
#include "runtime/model/wing_library.h"

namespace cleave::runtime::distributed {

Expected<RankLayout> rankLayout(const std::optional<DistributedEnv>& env, std::optional<int> pipelineRanks,
                                std::int64_t batch) {
  RankLayout layout;
  layout.rank = env ? env->rank : 0;
  layout.ranks = env ? env->worldSize : 1;
  layout.pipelineRanks = pipelineRanks.value_or(layout.ranks);
  if (layout.ranks % layout.pipelineRanks != 0)
    return Error(ErrorCode::Usage) << "--pipeline-ranks " << layout.pipelineRanks << " does not divide the "
                                   << layout.ranks << " rank(s)"
                                   << (env ? "" : " of a single process (replicas run under `cleave launch`)");
  if (batch % layout.replicas() != 0)
    return Error(ErrorCode::Usage) << "--batch " << batch << " does not split into " << layout.replicas()
                                   << " equal shares, one per replica of the " << layout.pipelineRanks
                                   << "-rank pipeline";
  return layout;
}

Expected<LayoutCommunicators> connectLayout(const RankLayout& layout, const std::string& transport,
                                            const std::optional<DistributedEnv>& env) {
  LayoutCommunicators comms{Communicator::local(), nullptr, nullptr};
  if (env) {
    CLEAVE_TRY(comms.world, Communicator::connect(*env, transport));
  }
  if (layout.replicas() == 1)
    return comms;
  std::vector<int> pipeline, replicas;
  for (int p = 0; p < layout.pipelineRanks; ++p)
    pipeline.push_back(layout.replica() * layout.pipelineRanks + p);
  for (int k = 0; k < layout.replicas(); ++k)
    replicas.push_back(k * layout.pipelineRanks + layout.pipelineRank());
  CLEAVE_TRY(comms.pipeline, comms.world->subgroup("pipeline-" + std::to_string(layout.replica()), pipeline));
  CLEAVE_TRY(comms.replicas, comms.world->subgroup("replicas-" + std::to_string(layout.pipelineRank()), replicas));
  return comms;
}

Expected<std::string> chooseTransport(const std::string& requested, const std::string& backend) {
  // nccl is the CUDA wing's: registered once its library is loaded (train loaded it for a CUDA
  // backend; a build without it keeps gloo alone).
  CLEAVE_TRY(const BackendDevice trainsOn, backendDevice(backend));
  const bool onCuda = trainsOn.device.is_cuda();
  if (requested == "nccl" && !onCuda)
    return Error(ErrorCode::Usage)
           << "--transport nccl moves CUDA tensors: train the stages on aten-cuda (--backend) or use gloo";
  if (requested == "nccl")
    (void)loadWingProviding(requested);
  const std::vector<std::string> names = transportNames();
  if (requested == "auto") {
    const bool nccl = std::find(names.begin(), names.end(), "nccl") != names.end();
    return std::string(onCuda && nccl ? "nccl" : "gloo");
  }
  if (std::find(names.begin(), names.end(), requested) == names.end())
    return Error(ErrorCode::InvalidArgument) << "--transport " << requested << ": not in this build (it has "
                                             << joinStrings(names)
                                             << "; NCCL needs a libtorch with CUDA: scripts/gpu-build)";
  return requested;
}

} // namespace cleave::runtime::distributed
