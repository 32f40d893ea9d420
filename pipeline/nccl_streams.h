// pipeline/nccl_streams.h - whether a schedule progresses on NCCL, whose point-to-point messages
// have no tags and run on CUDA streams, and how a runner should hand them to it.
//
// NCCL's semantics, as modelled here: every operation is issued by the host without blocking it,
// onto the stream of the communicator it uses; a stream runs its operations in issue order, and an
// operation issued after a compute action starts only once that action is done (ProcessGroupNCCL
// makes its stream wait for the compute stream at issue). A batch (batch_isend_irecv, one
// ncclGroupStart/End) starts as a whole and completes when all of its operations have. Messages
// have no tags: the k-th send on a channel (sender, receiver) meets the receiver's k-th receive on
// it, and both must be running at once (a send completes only with its receive). A compute action
// waits for the batches that hold its receives. Two ways a runner can issue a rank's messages:
//   PairStreams     PyTorch's pipelining: one communicator (one stream) per rank pair, carrying
//                   both directions; after each compute action, one batch with its sends and the
//                   receives of the action `lookahead` places later (before the first action, the
//                   receives of the first lookahead + 1), receives in the order their actions run.
//   ChannelStreams  cleave's NCCL runner: one communicator (one stream) per channel, no batches,
//                   so a receive waits for nothing but its own channel's earlier messages and a
//                   compute action for nothing but its own receives; sends issued as in
//                   PairStreams; each channel's receives posted in the order its sender sends (the
//                   receiver replays the sender's part of the schedule), as far as the messages
//                   of the next `lookahead` + 1 actions.
// With ChannelStreams a schedule progresses exactly when it does with buffered sends
// (validateSchedule): receives posted ahead never block, and the channels' order is the senders'
// by construction. PairStreams can hang a schedule that buffered sends run (a receive posted
// ahead of a send on the same stream, both ranks waiting for the other's send): what the
// validator reports for it, with the batches each rank is stuck in.
// Messages are the schedule's (F from stage s to s + 1, B from s + 1 to s, one per microbatch);
// a plan's skip connections between stages further apart are further channels of the same rules.
// Complexity: O((A + M) x P) for A compute actions, M messages and P passes (P <= A + M);
// checkTransports adds the validator's plays (schedule_sim.h).
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedule.h"

namespace cleave::pipeline {

enum class NcclIssue : std::uint8_t { PairStreams, ChannelStreams };
// How many compute actions ahead cleave's pipeline trainer posts its receives: one action's
// compute covers the next messages' transfer, and a second absorbs jitter; more would only hold
// buffers longer. checkTransports reports schedules with it.
inline constexpr std::uint32_t kReceiveLookahead = 2;

// One message as a channel carries it: (kind, receiving stage, microbatch), written "1F3" / "0B2".
struct StageMessage {
  bool backward = false;
  std::uint32_t stage = 0, microbatch = 0;
  friend bool operator==(const StageMessage&, const StageMessage&) = default;
};
std::string formatStageMessage(const StageMessage& message);

// What compute action `a` of `rank` sends to and receives from other ranks, as (peer, message).
struct RankMessage {
  std::uint32_t peer = 0;
  StageMessage message;
};
std::vector<RankMessage> actionSends(const Schedule& schedule, std::uint32_t rank, const Action& a);
std::vector<RankMessage> actionReceives(const Schedule& schedule, std::uint32_t rank, const Action& a);

// Per rank, per peer it receives from: the messages of that channel in the order the peer sends
// them (its compute actions in order, each action's sends in actionSends' order). What a
// ChannelStreams receiver posts. O(A).
std::vector<std::vector<std::vector<StageMessage>>> channelOrders(const Schedule& schedule);

// Whether `schedule` (validated with buffered sends first) progresses on NCCL when issued `how`
// with receives `lookahead` actions ahead. Fails (InvalidArgument) naming the first channel whose
// k-th send and receive differ, or the deadlock: each blocked rank's next action and the batch
// its stream is stuck in.
Status checkNccl(const Schedule& schedule, NcclIssue how, std::uint32_t lookahead);

// For a schedule with its SEND/RECV actions that validates with buffered sends: why it would not
// with rendezvous sends, with ordered channels (schedule_sim.h), and on NCCL as cleave's trainer
// issues messages there (ChannelStreams, its lookahead) and as PyTorch's pipelining does
// (PairStreams, receives just before their action); empty: it does.
struct TransportFit {
  std::string rendezvous, orderedChannels, ncclChannelStreams, ncclPairStreams;
};
TransportFit checkTransports(const Schedule& schedule);

} // namespace cleave::pipeline
