// runtime/distributed/rank_layout.h - where a training process stands among the ranks, and what it
// talks over: its world rank, its pipeline and replica (pipeline parallelism times data
// parallelism), the communicators of that layout, and the backend and transport it trains with,
// resolved once.
//
// Guarantees: a layout's pipeline ranks divide its ranks and its batch splits into equal replica
// shares (else Usage errors naming the option); every rank of a layout creates the same
// subgroups in the same order (pipelines first, then replicas), as c10d requires.
// Complexity: O(ranks) to connect, besides c10d's rendezvous.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "pipeline/schedule.h"
#include "runtime/distributed/communicator.h"
#include "runtime/distributed/environment.h"
#include "runtime/distributed/rank_agreement.h"

namespace cleave::runtime::distributed {

// World rank `rank` of `ranks`: pipeline rank rank % pipelineRanks of replica rank / pipelineRanks.
struct RankLayout {
  int rank = 0, ranks = 1, pipelineRanks = 1;
  int replica() const { return rank / pipelineRanks; }
  int replicas() const { return ranks / pipelineRanks; }
  int pipelineRank() const { return rank % pipelineRanks; }
  std::int64_t replicaRows(std::int64_t batch) const { return batch / replicas(); }
};

// The layout of this process (`env`: under launch; none: a single process), with `pipelineRanks`
// (--pipeline-ranks; default one pipeline over every rank) and the training `batch`.
// Fails: Usage, naming --pipeline-ranks or --batch.
Expected<RankLayout> rankLayout(const std::optional<DistributedEnv>& env, std::optional<int> pipelineRanks,
                                std::int64_t batch);

// The world's communicator (checkpoints, printing; a local one without `env`) and, with
// replicas, this rank's pipeline's and its replicas'. Once the world is joined, and before the
// subgroups (which ranks on other layouts would make otherwise), the ranks agree on `terms`
// (rank_agreement.h): a disagreement fails every rank within seconds.
struct LayoutCommunicators {
  std::unique_ptr<Communicator> world, pipeline, replicas;
  double agreementSeconds = 0.0; // what agreeing on the terms took
  Communicator& ofPipeline() { return pipeline ? *pipeline : *world; }
};
Expected<LayoutCommunicators> connectLayout(const RankLayout& layout, const std::string& transport,
                                            const std::optional<DistributedEnv>& env, const RankTerms& terms);

// Where this rank's stages train and how the ranks talk, resolved once, before anything asks ATen
// about a device or any rank connects: the backend's wing library loaded, the rank's backend
// (rankBackend: aten-cuda is aten-cuda:G under launch) and the transport for --transport (a
// name, or auto: the transport the backend's wing declares where this build registers it, else
// kHostTransport). A wing's transport moves only its own devices' tensors.
struct RankDevice {
  std::string backend;   // this rank's backend name
  std::string transport; // a registered transport's name
};
// `env`: under launch; null in a single process. Fails: what loadBackendWing and backendDevice
// fail with (an unknown backend, a bad index, a wing library that does not load), Usage (a wing's
// transport for stages on another device), InvalidArgument (a transport this build lacks).
Expected<RankDevice> resolveRankDevice(const std::string& backend, const std::string& transport,
                                       const DistributedEnv* env);

// KIND's schedule of a plan's `stages` over `microbatches` on `ranks` (stage s on rank s % ranks),
// for the distributed runners (cleave run --distributed, cleave train): the generator's own checks
// fail as usage errors; then it is validated for the runners' transport (buffered sends, channels
// in order), so the ranks following it cannot deadlock.
Expected<pipeline::Schedule> rankSchedule(pipeline::ScheduleKind kind, std::size_t stages, std::int64_t microbatches,
                                          int ranks);

} // namespace cleave::runtime::distributed
