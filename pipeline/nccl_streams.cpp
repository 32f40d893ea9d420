#include "pipeline/nccl_streams.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "pipeline/schedule_sim.h"

namespace cleave::pipeline {

namespace {
using A = ActionType;

bool isBackwardForInputs(A type) { return type == A::Backward || type == A::BackwardInput; }

// One send or receive as a rank issues it.
struct StreamOp {
  bool send = false;
  std::uint32_t rank = 0, peer = 0;
  StageMessage message;
  std::size_t batch = 0; // its batch (index into NcclPlay::batches_)
  bool done = false;
};

// The operations one rank issues on one stream at one point of its compute: they start together.
struct Batch {
  std::uint32_t rank = 0;
  std::size_t stream = 0;     // index into NcclPlay::streams_
  std::size_t issueAfter = 0; // the rank's compute actions done before it was issued
  std::size_t remaining = 0;  // operations not yet done
  std::vector<std::size_t> ops;
};

// A communicator's stream on one rank: its batches in issue order, the first not done at `head`.
struct Stream {
  std::uint32_t rank = 0, peer = 0;
  std::vector<std::size_t> batches;
  std::size_t head = 0;
};

// A channel's sends (in the sender's issue order) and receives (in the receiver's).
struct Channel {
  std::vector<std::size_t> sends, receives;
  std::size_t matched = 0;
};

class NcclPlay {
public:
  NcclPlay(const Schedule& s, NcclIssue how, std::uint32_t lookahead)
      : s_(s), how_(how), lookahead_(lookahead), computes_(s.ranks), done_(s.ranks, 0), needs_(s.ranks) {
    for (std::uint32_t r = 0; r < s.ranks; ++r)
      computes_[r] = rankComputeActions(&s, s.stages, s.microbatches, s.ranks, r, true);
    if (how == NcclIssue::ChannelStreams) {
      orders_ = channelOrders(s);
      for (std::uint32_t r = 0; r < s.ranks; ++r)
        for (const std::vector<StageMessage>& order : orders_[r])
          for (std::size_t k = 0; k < order.size(); ++k)
            positions_[{r, key3(order[k])}] = k;
    }
    for (std::uint32_t r = 0; r < s.ranks; ++r)
      issueRank(r);
  }

  Status play() {
    for (const auto& [ends, channel] : channels_)
      if (channel.sends.size() != channel.receives.size())
        return Error(ErrorCode::InvalidArgument) << "channel rank " << ends.first << " -> rank " << ends.second << ": "
                                                 << channel.sends.size() << " sends and " << channel.receives.size()
                                                 << " receives";
    for (;;) {
      bool moved = runComputes();
      CLEAVE_TRY(bool transferred, transfer());
      if (!moved && !transferred)
        break;
    }
    for (std::uint32_t r = 0; r < s_.ranks; ++r)
      if (done_[r] < computes_[r].size())
        return deadlock();
    return {};
  }

private:
  // The operations rank r issues, point by point: before its first compute action, and after each.
  void issueRank(std::uint32_t r) {
    const std::vector<Action>& computes = computes_[r];
    std::vector<std::size_t> posted(s_.ranks, 0); // ChannelStreams: per peer, messages posted
    std::size_t receivesIssued = 0;                // PairStreams: compute actions whose receives are issued
    for (std::size_t point = 0; point <= computes.size(); ++point) {
      std::map<std::size_t, std::size_t> batchOf; // stream key -> batch at this point
      auto add = [&](bool send, std::uint32_t peer, const StageMessage& message) {
        const std::size_t key = how_ == NcclIssue::PairStreams ? peer : 2 * std::size_t{peer} + (send ? 1 : 0);
        // Channel streams need no batch: each operation waits for nothing but its channel's
        // earlier ones, and its compute for nothing but it.
        auto [slot, fresh] = batchOf.try_emplace(key, batches_.size());
        if (how_ == NcclIssue::ChannelStreams && !fresh) {
          slot->second = batches_.size();
          fresh = true;
        }
        if (fresh) {
          batches_.push_back({r, 0, point, 0, {}});
          batches_.back().stream = streamOf(r, peer, key);
        }
        const std::size_t id = ops_.size();
        ops_.push_back({send, r, peer, message, slot->second, false});
        batches_[slot->second].ops.push_back(id);
        ++batches_[slot->second].remaining;
        Channel& channel = channels_[send ? std::pair{r, peer} : std::pair{peer, r}];
        (send ? channel.sends : channel.receives).push_back(id);
        if (!send)
          receiveOp_[{r, key3(message)}] = id;
      };
      if (point > 0)
        for (const RankMessage& out : actionSends(s_, r, computes[point - 1]))
          add(true, out.peer, out.message);
      const std::size_t horizon = std::min(computes.size(), point + lookahead_ + 1); // actions whose receives are due
      if (how_ == NcclIssue::PairStreams) {
        for (; receivesIssued < horizon; ++receivesIssued)
          for (const RankMessage& in : actionReceives(s_, r, computes[receivesIssued]))
            add(false, in.peer, in.message);
        continue;
      }
      for (; receivesIssued < horizon; ++receivesIssued)
        for (const RankMessage& in : actionReceives(s_, r, computes[receivesIssued])) {
          const std::vector<StageMessage>& order = orders_[r][in.peer];
          const std::size_t position = positions_.at({r, key3(in.message)});
          for (; posted[in.peer] <= position && posted[in.peer] < order.size(); ++posted[in.peer])
            add(false, in.peer, order[posted[in.peer]]);
        }
    }
    for (std::size_t k = 0; k < computes.size(); ++k)
      for (const RankMessage& in : actionReceives(s_, r, computes[k]))
        needs_[r].push_back({k, receiveOp_.at({r, key3(in.message)})});
    std::stable_sort(needs_[r].begin(), needs_[r].end());
  }

  static std::uint64_t key3(const StageMessage& m) {
    return (std::uint64_t{m.stage} << 33) | (std::uint64_t{m.microbatch} << 1) | (m.backward ? 1 : 0);
  }

  std::size_t streamOf(std::uint32_t rank, std::uint32_t peer, std::size_t key) {
    auto [slot, fresh] = streamIndex_.try_emplace({rank, key}, streams_.size());
    if (fresh)
      streams_.push_back({rank, peer, {}, 0});
    streams_[slot->second].batches.push_back(batches_.size() - 1);
    return slot->second;
  }

  // A compute action runs once the batches holding its receives are done.
  bool runComputes() {
    bool moved = false;
    for (std::uint32_t r = 0; r < s_.ranks; ++r) {
      auto need = std::lower_bound(needs_[r].begin(), needs_[r].end(), std::pair{done_[r], std::size_t{0}});
      while (done_[r] < computes_[r].size()) {
        bool ready = true;
        for (; need != needs_[r].end() && need->first == done_[r]; ++need)
          if (batches_[ops_[need->second].batch].remaining > 0) {
            ready = false;
            break;
          }
        if (!ready)
          break;
        ++done_[r];
        moved = true;
      }
    }
    return moved;
  }

  // Whether an operation's batch is running: first on its stream, and issued after compute done.
  bool running(const StreamOp& op) const {
    const Batch& batch = batches_[op.batch];
    const Stream& stream = streams_[batch.stream];
    return stream.batches[stream.head] == op.batch && batch.issueAfter <= done_[op.rank];
  }

  Expected<bool> transfer() {
    bool moved = false;
    for (auto& [ends, channel] : channels_)
      for (; channel.matched < channel.sends.size(); ++channel.matched) {
        StreamOp& send = ops_[channel.sends[channel.matched]];
        StreamOp& receive = ops_[channel.receives[channel.matched]];
        if (!(send.message == receive.message))
          return Error(ErrorCode::InvalidArgument)
                 << "channel rank " << ends.first << " -> rank " << ends.second << ": message " << channel.matched
                 << " is sent as " << formatStageMessage(send.message) << " but received as "
                 << formatStageMessage(receive.message) << " (NCCL pairs them in order)";
        if (!running(send) || !running(receive))
          break;
        for (StreamOp* op : {&send, &receive}) {
          op->done = true;
          Batch& batch = batches_[op->batch];
          if (--batch.remaining == 0) {
            Stream& stream = streams_[batch.stream];
            while (stream.head < stream.batches.size() && batches_[stream.batches[stream.head]].remaining == 0)
              ++stream.head;
          }
        }
        moved = true;
      }
    return moved;
  }

  std::string describeBatch(const Batch& batch) const {
    std::ostringstream text;
    const std::vector<Action>& computes = computes_[batch.rank];
    text << "the batch issued " << (batch.issueAfter == 0 ? "before its first action" : "after " + formatAction(computes[batch.issueAfter - 1]))
         << " [";
    bool first = true;
    for (std::size_t id : batch.ops)
      if (!ops_[id].done) {
        text << (first ? "" : ", ") << (ops_[id].send ? "send " : "receive ") << formatStageMessage(ops_[id].message);
        first = false;
      }
    return text.str() + "]";
  }

  Error deadlock() const {
    std::ostringstream blocked;
    for (std::uint32_t r = 0; r < s_.ranks; ++r) {
      if (done_[r] == computes_[r].size())
        continue;
      blocked << (blocked.tellp() > 0 ? "; " : "") << "rank " << r << " before " << formatAction(computes_[r][done_[r]]);
      for (const Stream& stream : streams_)
        if (stream.rank == r && stream.head < stream.batches.size())
          blocked << ", its stream with rank " << stream.peer << " in " << describeBatch(batches_[stream.batches[stream.head]]);
    }
    const char* how = how_ == NcclIssue::PairStreams ? "one stream per rank pair" : "one stream per channel";
    return Error(ErrorCode::InvalidArgument) << "on NCCL (" << how << ", receives " << lookahead_
                                             << " actions ahead) the schedule hangs: " << blocked.str();
  }

  const Schedule& s_;
  NcclIssue how_;
  std::uint32_t lookahead_;
  std::vector<std::vector<Action>> computes_;
  std::vector<std::size_t> done_; // per rank: compute actions done
  // Per rank: (compute action index, receive operation it waits for), sorted.
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> needs_;
  std::vector<std::vector<std::vector<StageMessage>>> orders_; // ChannelStreams: channelOrders
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::size_t> positions_; // (receiver, message) -> place in its channel
  std::vector<StreamOp> ops_;
  std::vector<Batch> batches_;
  std::vector<Stream> streams_;
  std::map<std::pair<std::uint32_t, std::size_t>, std::size_t> streamIndex_;       // (rank, key) -> stream
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::size_t> receiveOp_;       // (rank, message) -> op
  std::map<std::pair<std::uint32_t, std::uint32_t>, Channel> channels_;             // (sender, receiver)
};
} // namespace

std::string formatStageMessage(const StageMessage& message) {
  return std::to_string(message.stage) + (message.backward ? "B" : "F") + std::to_string(message.microbatch);
}

std::vector<RankMessage> actionSends(const Schedule& s, std::uint32_t rank, const Action& a) {
  if (a.type == A::Forward && a.stage + 1 < s.stages && s.rankOf(a.stage + 1) != rank)
    return {{s.rankOf(a.stage + 1), {false, a.stage + 1, a.microbatch}}};
  if (isBackwardForInputs(a.type) && a.stage > 0 && s.rankOf(a.stage - 1) != rank)
    return {{s.rankOf(a.stage - 1), {true, a.stage - 1, a.microbatch}}};
  return {};
}

std::vector<RankMessage> actionReceives(const Schedule& s, std::uint32_t rank, const Action& a) {
  if (a.type == A::Forward && a.stage > 0 && s.rankOf(a.stage - 1) != rank)
    return {{s.rankOf(a.stage - 1), {false, a.stage, a.microbatch}}};
  if (isBackwardForInputs(a.type) && a.stage + 1 < s.stages && s.rankOf(a.stage + 1) != rank)
    return {{s.rankOf(a.stage + 1), {true, a.stage, a.microbatch}}};
  return {};
}

std::vector<std::vector<std::vector<StageMessage>>> channelOrders(const Schedule& s) {
  std::vector<std::vector<std::vector<StageMessage>>> orders(s.ranks, std::vector<std::vector<StageMessage>>(s.ranks));
  for (std::uint32_t sender = 0; sender < s.ranks; ++sender)
    for (const Action& a : rankComputeActions(&s, s.stages, s.microbatches, s.ranks, sender, true))
      for (const RankMessage& out : actionSends(s, sender, a))
        orders[out.peer][sender].push_back(out.message);
  return orders;
}

Status checkNccl(const Schedule& schedule, NcclIssue how, std::uint32_t lookahead) {
  CLEAVE_CHECK(validateSchedule(schedule));
  return NcclPlay(schedule, how, lookahead).play();
}

TransportFit checkTransports(const Schedule& schedule) {
  auto why = [](const Status& status) { return status ? std::string() : status.error().message(); };
  return {why(validateSchedule(schedule, {SendSemantics::Rendezvous, false})),
          why(validateSchedule(schedule, {SendSemantics::Buffered, true})),
          why(checkNccl(schedule, NcclIssue::ChannelStreams, kReceiveLookahead)),
          why(checkNccl(schedule, NcclIssue::PairStreams, 0))};
}

} // namespace cleave::pipeline
