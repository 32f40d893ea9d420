#include "pipeline/receive_buffer_model.h"

#include <algorithm>
#include <map>

#include "base/strings.h"

namespace cleave::pipeline {

namespace {
std::optional<std::int64_t> number(std::string_view text) {
  std::optional<std::int64_t> value = parseInteger(text);
  return value && *value >= 0 ? value : std::nullopt;
}

// A message a rank receives: the own action that reads it, the one after which it is let go, its bytes.
struct Inbound {
  std::size_t reader = 0, release = 0;
  std::int64_t bytes = 0;
};

// (stage, microbatch, backward) -> a key for the rank's own actions.
std::uint64_t keyOf(std::uint32_t stage, std::uint32_t microbatch, bool backward) {
  return (std::uint64_t{stage} << 33) | (std::uint64_t{microbatch} << 1) | (backward ? 1u : 0u);
}

// Where each of rank `rank`'s compute actions stands: the F and the first backward (B or I) of each
// (stage, microbatch) read messages; a forward's inputs are let go after its B, or W.
struct OwnActions {
  std::vector<Action> actions;
  std::map<std::uint64_t, std::size_t> reader, lastBackward;
};

OwnActions ownActions(const Schedule& schedule, std::uint32_t rank) {
  OwnActions own;
  own.actions = rankComputeActions(&schedule, schedule.stages, schedule.microbatches, schedule.ranks, rank, true);
  for (std::size_t k = 0; k < own.actions.size(); ++k) {
    const Action& a = own.actions[k];
    const bool backward = a.type != ActionType::Forward;
    if (a.type != ActionType::BackwardWeight)
      own.reader.try_emplace(keyOf(a.stage, a.microbatch, backward), k);
    if (backward)
      own.lastBackward[keyOf(a.stage, a.microbatch, true)] = k;
  }
  return own;
}

// Per peer, what it sends rank `rank`, in the order it sends it (its actions in order; a forward's
// messages by reading stage, a backward's by producing stage).
Expected<std::map<std::uint32_t, std::vector<Inbound>>> channelsInto(const Schedule& schedule, std::uint32_t rank,
                                                                     const OwnActions& own,
                                                                     const std::vector<StageEdge>& edges) {
  std::map<std::uint32_t, std::vector<Inbound>> channels;
  auto index = [&](const std::map<std::uint64_t, std::size_t>& of, std::uint64_t key, const Action& why) -> Expected<std::size_t> {
    auto found = of.find(key);
    if (found == of.end())
      return Error(ErrorCode::InvalidArgument) << "rank " << rank << " does not run what " << formatAction(why) << " sends it";
    return found->second;
  };
  for (std::uint32_t peer = 0; peer < schedule.ranks; ++peer) {
    if (peer == rank)
      continue;
    for (const Action& a : rankComputeActions(&schedule, schedule.stages, schedule.microbatches, schedule.ranks, peer, true)) {
      const bool forward = a.type == ActionType::Forward;
      if (!forward && a.type == ActionType::BackwardWeight)
        continue;
      for (const StageEdge& edge : edges) {
        const std::uint32_t sender = forward ? edge.from : edge.to, receiver = forward ? edge.to : edge.from;
        if (sender != a.stage || schedule.rankOf(receiver) != rank)
          continue;
        CLEAVE_TRY(std::size_t reader, index(own.reader, keyOf(receiver, a.microbatch, !forward), a));
        CLEAVE_TRY(std::size_t release, index(own.lastBackward, keyOf(receiver, a.microbatch, true), a));
        channels[peer].push_back({reader, release, edge.bytes});
      }
    }
  }
  return channels;
}
} // namespace

Expected<std::vector<StageEdge>> parseStageEdges(std::string_view text, std::uint32_t stages) {
  std::vector<StageEdge> edges;
  for (std::string_view part : splitString(text, ',')) {
    const std::size_t arrow = part.find('>'), colon = part.find(':');
    std::optional<std::int64_t> from, to, bytes;
    if (arrow != std::string_view::npos && colon != std::string_view::npos && arrow < colon) {
      from = number(part.substr(0, arrow));
      to = number(part.substr(arrow + 1, colon - arrow - 1));
      bytes = number(part.substr(colon + 1));
    }
    if (!from || !to || !bytes || *from >= *to || *to >= stages)
      return Error(ErrorCode::InvalidArgument) << "--message-bytes '" << part
                                               << "': expected FROM>TO:BYTES, stages FROM < TO below " << stages;
    edges.push_back({static_cast<std::uint32_t>(*from), static_cast<std::uint32_t>(*to), *bytes});
  }
  std::stable_sort(edges.begin(), edges.end(), [](const StageEdge& a, const StageEdge& b) {
    return a.to != b.to ? a.to < b.to : a.from < b.from;
  });
  return edges;
}

Expected<std::vector<std::int64_t>> receiveBufferPeaks(const Schedule& schedule, const std::vector<StageEdge>& edges,
                                                       std::uint32_t lookahead) {
  for (const StageEdge& edge : edges)
    if (edge.from >= edge.to || edge.to >= schedule.stages)
      return Error(ErrorCode::InvalidArgument) << "a message from stage " << edge.from << " to " << edge.to
                                               << " in a schedule of " << schedule.stages << " stages";
  std::vector<std::int64_t> peaks(schedule.ranks, 0);
  for (std::uint32_t rank = 0; rank < schedule.ranks; ++rank) {
    const OwnActions own = ownActions(schedule, rank);
    CLEAVE_TRY(auto channels, channelsInto(schedule, rank, own, edges));
    // Per own action: the channel positions (+1) it reads; then play posting and letting go.
    std::vector<std::vector<std::pair<std::uint32_t, std::size_t>>> reads(own.actions.size());
    for (const auto& [peer, messages] : channels)
      for (std::size_t k = 0; k < messages.size(); ++k)
        reads[messages[k].reader].push_back({peer, k + 1});
    std::map<std::uint32_t, std::size_t> needed, posted;
    std::vector<std::int64_t> released(own.actions.size(), 0);
    std::int64_t taken = 0;
    std::size_t scanned = 0;
    for (std::size_t k = 0; k < own.actions.size(); ++k) {
      for (; scanned < own.actions.size() && scanned <= k + lookahead; ++scanned)
        for (const auto& [peer, count] : reads[scanned])
          needed[peer] = std::max(needed[peer], count);
      for (const auto& [peer, due] : needed)
        for (std::size_t& p = posted[peer]; p < due; ++p) {
          const Inbound& message = channels.at(peer)[p];
          taken += message.bytes;
          released[message.release] += message.bytes;
          peaks[rank] = std::max(peaks[rank], taken);
        }
      taken -= released[k];
    }
  }
  return peaks;
}

} // namespace cleave::pipeline
