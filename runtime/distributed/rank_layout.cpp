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
                                            const std::optional<DistributedEnv>& env, const RankTerms& terms) {
  LayoutCommunicators comms{Communicator::local(), nullptr, nullptr};
  if (env) {
    CLEAVE_TRY(comms.world, Communicator::connect(*env, transport));
    CLEAVE_TRY(comms.agreementSeconds, agreeBeforeStart(*comms.world, terms));
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

namespace {

// The transport for `requested` (--transport: a name, or auto) when the stages train on `backend`
// (its wing loaded): a wing's transport moves only its own devices' tensors; auto is the wing's
// where this build registers it, else the host transport, which moves any device's.
Expected<std::string> chooseTransport(const std::string& requested, const std::string& backend) {
  const std::optional<WingTransport> own = wingTransportOfBackend(backend);
  const std::optional<WingTransport> named = wingTransportNamed(requested);
  if (named && (!own || own->transport != named->transport))
    return Error(ErrorCode::Usage) << "--transport " << requested << " moves " << named->wing
                                   << " tensors: train the stages on " << named->backendBase << " (--backend) or use "
                                   << kHostTransport;
  if (named) // registered as its library loads; a build without it answers below
    (void)loadWingProviding(requested);
  const std::vector<std::string> names = transportNames();
  auto registered = [&](std::string_view name) { return std::find(names.begin(), names.end(), name) != names.end(); };
  if (requested == "auto")
    return std::string(own && registered(own->transport) ? own->transport : kHostTransport);
  if (registered(requested))
    return requested;
  Error error(ErrorCode::InvalidArgument);
  error << "--transport " << requested << ": not in this build (it has " << joinStrings(names);
  if (named)
    error << "; " << requested << " is the " << named->wing << " wing's, built against a libtorch with " << named->wing
          << ": scripts/gpu-build";
  return std::move(error << ")");
}

} // namespace

Expected<RankDevice> resolveRankDevice(const std::string& backend, const std::string& transport,
                                       const DistributedEnv* env) {
  // Before anything asks ATen about a device: libtorch keeps its first answer, so a wing loaded
  // later would find its device off for good.
  CLEAVE_CHECK(loadBackendWing(backend));
  RankDevice resolved{rankBackend(backend, env), kHostTransport};
  CLEAVE_TRY(const BackendDevice named, backendDevice(resolved.backend)); // an unknown name fails before any rank connects
  (void)named;
  CLEAVE_TRY(resolved.transport, chooseTransport(transport, resolved.backend));
  return resolved;
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
