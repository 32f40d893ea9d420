#include "runtime/distributed/receive_order.h"

#include <algorithm>

namespace cleave::runtime::distributed {

namespace {
// An action as a reader: (stage, microbatch, forward or backward); I reads what B would.
std::uint64_t readerKey(const pipeline::Action& a) {
  const bool backward = a.type != pipeline::ActionType::Forward;
  return (std::uint64_t{a.stage} << 33) | (std::uint64_t{a.microbatch} << 1) | (backward ? 1 : 0);
}
} // namespace

Expected<ReceiveOrder> ReceiveOrder::plan(int rank, int ranks, const std::vector<pipeline::Action>& own,
                                          const ActionsOf& actionsOf, const SendsOf& sendsOf) {
  std::map<std::uint64_t, std::size_t> readerIndex; // reader key -> own action (its first: B or I)
  for (std::size_t k = 0; k < own.size(); ++k)
    if (own[k].type != pipeline::ActionType::BackwardWeight)
      readerIndex.try_emplace(readerKey(own[k]), k);
  ReceiveOrder order;
  order.reads_.resize(own.size());
  for (int peer = 0; peer < ranks; ++peer) {
    if (peer == rank)
      continue;
    for (const pipeline::Action& action : actionsOf(peer)) {
      CLEAVE_TRY(std::vector<OutgoingMessage> sends, sendsOf(peer, action));
      for (const OutgoingMessage& message : sends) {
        if (message.receiver != rank)
          continue;
        auto reader = readerIndex.find(readerKey(message.reader));
        if (reader == readerIndex.end())
          return Error(ErrorCode::InvalidArgument)
                 << "rank " << peer << " sends '" << message.value << "' for " << pipeline::formatAction(message.reader)
                 << " after " << pipeline::formatAction(action) << ", which rank " << rank << " does not run";
        std::vector<Inbound>& channel = order.channels_[peer];
        channel.push_back({message.tag, message.shapeKey});
        order.reads_[reader->second].push_back({peer, channel.size()});
      }
    }
  }
  return order;
}

void ReceiveOrder::restart() {
  posted_.clear();
  needed_.clear();
  scanned_ = 0;
}

Status ReceiveOrder::postThrough(std::size_t through, const Post& post) {
  for (; scanned_ < reads_.size() && scanned_ <= through; ++scanned_)
    for (const auto& [peer, count] : reads_[scanned_])
      needed_[peer] = std::max(needed_[peer], count);
  for (const auto& [peer, due] : needed_) {
    const std::vector<Inbound>& channel = channels_.at(peer);
    for (std::size_t& k = posted_[peer]; k < due; ++k)
      CLEAVE_CHECK(post(peer, channel[k].tag, channel[k].shapeKey));
  }
  return {};
}

} // namespace cleave::runtime::distributed
