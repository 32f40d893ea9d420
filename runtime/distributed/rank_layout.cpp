#include "runtime/distributed/rank_layout.h"

#include <algorithm>
#include <vector>

#include "base/strings.h"
#include "pipeline/nccl_streams.h"
#include "pipeline/schedule_sim.h"
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

Expected<pipeline::Schedule> rankSchedule(pipeline::ScheduleKind kind, std::size_t stages, std::int64_t microbatches,
                                          int ranks) {
  Expected<pipeline::Schedule> made = pipeline::generateSchedule(kind, static_cast<std::uint32_t>(stages),
                                                                 static_cast<std::uint32_t>(microbatches),
                                                                 static_cast<std::uint32_t>(ranks));
  if (!made)
    return Error(ErrorCode::Usage) << "--schedule " << pipeline::kScheduleKinds.name(kind) << ": " << made.error().message();
  // Buffered sends are what the runners need: inference matches by tag, and the trainer posts
  // each channel's receives in its sender's order (runtime/distributed/receive_order.h), so its
  // messages meet in order on Gloo and NCCL alike, whatever order the receiver reads them in
  // (the V schedules' channels carry one stage's activations and another's gradients). The NCCL
  // check states that for the trainer's lookahead (pipeline/nccl_streams.h: ChannelStreams).
  CLEAVE_CHECK(pipeline::validateSchedule(pipeline::withCommunication(*made)));
  CLEAVE_CHECK(pipeline::checkNccl(*made, pipeline::NcclIssue::ChannelStreams, pipeline::kReceiveLookahead));
  return made;
}

} // namespace cleave::runtime::distributed
