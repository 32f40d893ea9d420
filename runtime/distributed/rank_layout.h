// runtime/distributed/rank_layout.h - where a training process stands among the ranks, and what it
// talks over: its world rank, its pipeline and replica (pipeline parallelism times data
// parallelism), the communicators of that layout, and the transport chosen for it. The CLI parses
// the options and prints; the decisions are these.
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
// replicas, this rank's pipeline's and its replicas'.
struct LayoutCommunicators {
  std::unique_ptr<Communicator> world, pipeline, replicas;
  Communicator& ofPipeline() { return pipeline ? *pipeline : *world; }
};
Expected<LayoutCommunicators> connectLayout(const RankLayout& layout, const std::string& transport,
                                            const std::optional<DistributedEnv>& env);

// The transport for `requested` (--transport: gloo, nccl or auto) when the stages train on
// `backend`: auto is NCCL where they train on CUDA and this build has it. Loads the CUDA wing for
// nccl. Fails: what backendDevice fails with (an unknown backend), Usage (nccl for stages off
// CUDA), InvalidArgument (a transport this build lacks).
Expected<std::string> chooseTransport(const std::string& requested, const std::string& backend);

// KIND's schedule of a plan's `stages` over `microbatches` on `ranks` (stage s on rank s % ranks),
// for the distributed runners (cleave run --distributed, cleave train): the generator's own checks
// fail as usage errors; then it is validated for the runners' transport (buffered sends, channels
// in order), so the ranks following it cannot deadlock.
Expected<pipeline::Schedule> rankSchedule(pipeline::ScheduleKind kind, std::size_t stages, std::int64_t microbatches,
                                          int ranks);

} // namespace cleave::runtime::distributed
