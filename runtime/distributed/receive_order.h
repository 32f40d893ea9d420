// runtime/distributed/receive_order.h - the order a pipeline rank posts its receives in: each
// channel's messages (those from one peer) in the order the peer sends them, which is what NCCL
// matches them by (it has no tags) and what a Gloo communicator told to match in order checks
// (communicator.h). A receive is posted once an action at most `lookahead` places ahead reads it
// or a later message of its channel (pipeline/nccl_streams.h: ChannelStreams, which progresses
// whenever the schedule does with buffered sends).
//
// The rank's peers' sends are replayed from the schedule: `sendsOf(peer, action)` must list what
// `peer` sends after `action`, in the order it sends them; the pipeline trainer sends through the
// same function, so the two cannot drift apart.
// Guarantees: every message the rank's actions read is posted exactly once, before the action
// that reads it, and each channel's in its sender's order. Fails: a peer's message that none of
// this rank's actions reads (a plan and schedule that disagree).
// Complexity: plan O(M log M + A) for M messages and A actions of all ranks (once for a run's
// steps of the same microbatch rows); posting O(M) a step.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/expected.h"
#include "pipeline/schedule.h"

namespace cleave::runtime::distributed {

// One message a rank sends after an action: to `receiver`, its tag and shape key, the value it
// carries, and the receiver's action that reads it (F, or B standing for the stage's B or I).
struct OutgoingMessage {
  int receiver = 0;
  std::uint32_t tag = 0;
  std::uint64_t shapeKey = 0;
  std::string value;
  pipeline::Action reader;
};

class ReceiveOrder {
public:
  using ActionsOf = std::function<std::vector<pipeline::Action>(int rank)>;
  using SendsOf = std::function<Expected<std::vector<OutgoingMessage>>(int sender, const pipeline::Action& action)>;
  using Post = std::function<Status(int peer, std::uint32_t tag, std::uint64_t shapeKey)>;

  // The receives of `rank`, whose compute actions are `own`, among `ranks` ranks.
  static Expected<ReceiveOrder> plan(int rank, int ranks, const std::vector<pipeline::Action>& own,
                                     const ActionsOf& actionsOf, const SendsOf& sendsOf);
  // Posts, through `post`, every receive not yet posted that actions 0 .. `through` read, with the
  // messages their channels carry before them.
  Status postThrough(std::size_t through, const Post& post);
  // Forgets what was posted: the next step posts the same receives again.
  void restart();

private:
  struct Inbound {
    std::uint32_t tag = 0;
    std::uint64_t shapeKey = 0;
  };
  std::map<int, std::vector<Inbound>> channels_; // peer -> its messages to this rank, in send order
  // Per own action: (peer, position in the channel + 1) of the last message it reads there.
  std::vector<std::vector<std::pair<int, std::size_t>>> reads_;
  std::map<int, std::size_t> posted_, needed_; // per peer: messages posted / due so far
  std::size_t scanned_ = 0;                    // own actions whose reads are in needed_
};

} // namespace cleave::runtime::distributed
