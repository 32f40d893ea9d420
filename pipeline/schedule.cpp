#include "pipeline/schedule.h"

#include <algorithm>
#include <charconv>
#include <deque>
#include <sstream>

#include "base/strings.h"

namespace cleave::pipeline {

namespace {
constexpr std::string_view kTypeNames[kActionTypes] = {"F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};

bool isComm(ActionType type) { return type >= ActionType::SendF; }
} // namespace

std::string formatAction(const Action& action) {
  return std::to_string(action.stage) + std::string(kTypeNames[static_cast<int>(action.type)]) +
         std::to_string(action.microbatch);
}

Expected<Action> parseAction(std::string_view text) {
  auto fail = [&] { return Error(ErrorCode::ParseError) << "'" << text << "' is not an action (e.g. 1F0, 0B3, 2SEND_B2)"; };
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9')
    ++digits;
  std::size_t tail = text.size();
  while (tail > digits && text[tail - 1] >= '0' && text[tail - 1] <= '9')
    --tail;
  if (digits == 0 || tail == text.size() || tail == digits)
    return fail();
  Action action;
  std::from_chars(text.data(), text.data() + digits, action.stage);
  std::from_chars(text.data() + tail, text.data() + text.size(), action.microbatch);
  std::string_view type = text.substr(digits, tail - digits);
  for (int t = 0; t < kActionTypes; ++t)
    if (type == kTypeNames[t]) {
      action.type = static_cast<ActionType>(t);
      return action;
    }
  return fail();
}

bool Schedule::hasCommunication() const {
  for (const auto& actions : perRank)
    for (const Action& action : actions)
      if (isComm(action.type))
        return true;
  return false;
}

namespace {
using A = ActionType;

void oneFOneB(Schedule& s) {
  std::uint32_t S = s.stages, M = s.microbatches;
  for (std::uint32_t r = 0; r < s.ranks; ++r) {
    auto& out = s.perRank[r];
    std::uint32_t warmup = std::min(M, S - r - 1), f = 0, b = 0;
    for (; f < warmup; ++f)
      out.push_back({r, A::Forward, f});
    while (f < M) {
      out.push_back({r, A::Forward, f++});
      out.push_back({r, A::Backward, b++});
    }
    while (b < M)
      out.push_back({r, A::Backward, b++});
  }
}

void interleaved(Schedule& s) {
  std::uint32_t R = s.ranks, M = s.microbatches, v = s.stages / s.ranks, total = M * v;
  auto forwardAt = [&](std::uint32_t r, std::uint32_t k) {
    std::uint32_t chunk = (k / R) % v, mb = (k / (R * v)) * R + k % R;
    return Action{chunk * R + r, A::Forward, mb};
  };
  auto backwardAt = [&](std::uint32_t r, std::uint32_t k) {
    std::uint32_t chunk = v - 1 - (k / R) % v, mb = (k / (R * v)) * R + k % R;
    return Action{chunk * R + r, A::Backward, mb};
  };
  for (std::uint32_t r = 0; r < R; ++r) {
    auto& out = s.perRank[r];
    std::uint32_t warmup = std::min(total, (R - r - 1) * 2 + (v - 1) * R), f = 0, b = 0;
    for (; f < warmup; ++f)
      out.push_back(forwardAt(r, f));
    while (f < total) {
      out.push_back(forwardAt(r, f++));
      out.push_back(backwardAt(r, b++));
    }
    while (b < total)
      out.push_back(backwardAt(r, b++));
  }
}

void loopedBfs(Schedule& s) {
  std::uint32_t R = s.ranks, v = s.stages / s.ranks;
  for (std::uint32_t r = 0; r < R; ++r)
    for (std::uint32_t c = 0; c < v; ++c)
      for (std::uint32_t m = 0; m < s.microbatches; ++m)
        s.perRank[r].push_back({c * R + r, A::Forward, m});
  for (std::uint32_t r = 0; r < R; ++r)
    for (std::uint32_t c = v; c-- > 0;)
      for (std::uint32_t m = 0; m < s.microbatches; ++m)
        s.perRank[r].push_back({c * R + r, A::Backward, m});
}

// Unit-time list scheduling: each step every rank runs one ready action, preferring I, then F
// (while fewer than S - r microbatches hold activations), then W.
void zeroBubble(Schedule& s) {
  std::uint32_t S = s.stages, M = s.microbatches;
  std::vector<std::vector<std::uint8_t>> forward(S, std::vector<std::uint8_t>(M, 0)), input = forward, weight = forward;
  std::vector<std::uint32_t> nextF(S, 0), inflight(S, 0);
  std::size_t remaining = static_cast<std::size_t>(S) * M * 3;
  while (remaining > 0) {
    std::vector<Action> step;
    for (std::uint32_t r = 0; r < S; ++r) {
      std::optional<Action> pick;
      for (std::uint32_t m = 0; m < M && !pick; ++m)
        if (forward[r][m] && !input[r][m] && (r + 1 == S || input[r + 1][m]))
          pick = Action{r, A::BackwardInput, m};
      if (!pick && nextF[r] < M && (r == 0 || forward[r - 1][nextF[r]]) && inflight[r] < S - r)
        pick = Action{r, A::Forward, nextF[r]};
      for (std::uint32_t m = 0; m < M && !pick; ++m)
        if (input[r][m] && !weight[r][m])
          pick = Action{r, A::BackwardWeight, m};
      if (pick)
        step.push_back(*pick);
    }
    for (const Action& a : step) { // completions become visible at the next step
      if (a.type == A::Forward) {
        forward[a.stage][a.microbatch] = 1;
        ++nextF[a.stage];
        ++inflight[a.stage];
      } else if (a.type == A::BackwardInput) {
        input[a.stage][a.microbatch] = 1;
      } else {
        weight[a.stage][a.microbatch] = 1;
        --inflight[a.stage];
      }
      s.perRank[a.stage].push_back(a);
      --remaining;
    }
  }
}
// One rank's actions under the V placement: its two stages (0: going down, stage r; 1: coming
// back up, stage 2R - 1 - r), a counter per stage and kind (each kind runs its microbatches in
// order), and the W's that I's left for later, oldest first.
class VRankActions {
public:
  VRankActions(std::vector<Action>& out, std::uint32_t rank, std::uint32_t ranks)
      : out_(out), stage_{rank, 2 * ranks - 1 - rank} {}
  std::uint32_t forwards(int c) const { return forwards_[c]; }
  std::uint32_t inputs(int c) const { return backwards_[c]; }
  std::uint32_t weights(int c) const { return weights_[c]; }
  void forward(int c) { out_.push_back({stage_[c], A::Forward, forwards_[c]++}); }
  void fullBackward(int c) { out_.push_back({stage_[c], A::Backward, backwards_[c]++}); }
  // I, its W in order among the stage's own (weight(c)), or queued (nextQueuedWeight()).
  void input(int c, bool queueWeight = false) {
    if (queueWeight)
      queued_.push_back({stage_[c], A::BackwardWeight, backwards_[c]});
    out_.push_back({stage_[c], A::BackwardInput, backwards_[c]++});
  }
  void weight(int c) { out_.push_back({stage_[c], A::BackwardWeight, weights_[c]++}); }
  void nextQueuedWeight() {
    out_.push_back(queued_.front());
    queued_.pop_front();
  }

private:
  std::vector<Action>& out_;
  std::uint32_t stage_[2];
  std::uint32_t forwards_[2] = {0, 0}, backwards_[2] = {0, 0}, weights_[2] = {0, 0};
  std::deque<Action> queued_;
};

// ZB-V (the zero-bubble paper, as torch's ScheduleZBVZeroBubble orders it): rank r warms up with
// 2(R - r) - 1 forwards of its first stage, r pairs of forwards of both, and R - r rounds of the
// second stage's F, I, W (the turn-around); then F, I, W of each stage in turn until every
// forward is done; then the I's left, and the W's after them.
void zeroBubbleV(Schedule& s) {
  const std::uint32_t R = s.ranks, M = s.microbatches;
  for (std::uint32_t r = 0; r < R; ++r) {
    VRankActions v(s.perRank[r], r, R);
    for (std::uint32_t k = 0; k < 2 * (R - r) - 1; ++k)
      v.forward(0);
    for (std::uint32_t k = 0; k < r; ++k) {
      v.forward(1);
      v.forward(0);
    }
    for (std::uint32_t k = 0; k < R - r; ++k) {
      v.forward(1);
      v.input(1);
      v.weight(1);
    }
    while (v.forwards(1) < v.forwards(0) || v.forwards(0) < M) {
      if (v.forwards(0) < M)
        v.forward(0);
      v.input(0);
      v.weight(0);
      v.forward(1);
      v.input(1);
      v.weight(1);
    }
    for (std::uint32_t k = 0; k < r; ++k) {
      v.input(0);
      v.input(1);
    }
    for (std::uint32_t k = 0; k < R - r; ++k) {
      v.input(0);
      v.weight(0);
    }
    while (v.weights(1) < v.inputs(1))
      v.weight(1);
    while (v.weights(0) < v.inputs(0))
      v.weight(0);
  }
}

// DualPipeV's last phases on rank r: r + 1 rounds of both stages' backwards, their second half
// split into I (W queued) from the middle on, then the queued W's interleaved with the first
// stage's last I's, then the W's left.
void dualPipeVDrain(VRankActions& v, std::uint32_t r, std::uint32_t R) {
  bool split = false;
  for (std::uint32_t k = 0; k < r + 1; ++k) {
    if (k == (r + 1) / 2 && r % 2 == 1)
      split = true;
    split ? v.input(1, true) : v.fullBackward(1);
    if (k == (r + 1) / 2 && r % 2 == 0)
      split = true;
    split ? v.input(0, true) : v.fullBackward(0);
  }
  for (std::uint32_t k = 0; k + r + 1 < R; ++k) {
    v.nextQueuedWeight();
    v.input(0, true);
  }
  for (std::uint32_t k = 0; k < r + 1; ++k)
    v.nextQueuedWeight();
}

// DualPipeV (DeepSeek's DualPipe cut in half): rank r runs 2(R - r - 1) forwards of its first
// stage, r + 1 pairs of forwards, R - r - 1 rounds of I, W, F of its second stage; then the main
// phase pairs a forward of one stage with the full backward of the other (F0&B1, F1&B0: what
// DualPipe overlaps), then drains (dualPipeVDrain).
void dualPipeV(Schedule& s) {
  const std::uint32_t R = s.ranks, M = s.microbatches;
  for (std::uint32_t r = 0; r < R; ++r) {
    VRankActions v(s.perRank[r], r, R);
    for (std::uint32_t k = 0; k < 2 * (R - r - 1); ++k)
      v.forward(0);
    for (std::uint32_t k = 0; k < r + 1; ++k) {
      v.forward(0);
      v.forward(1);
    }
    for (std::uint32_t k = 0; k + r + 1 < R; ++k) {
      v.input(1, true);
      v.nextQueuedWeight();
      v.forward(1);
    }
    for (std::uint32_t k = 0; k + 2 * R < M + r + 1; ++k) {
      v.forward(0);
      v.fullBackward(1);
      v.forward(1);
      v.fullBackward(0);
    }
    for (std::uint32_t k = 0; k + r + 1 < R; ++k) {
      v.fullBackward(1);
      v.forward(1);
      v.fullBackward(0);
    }
    dualPipeVDrain(v, r, R);
  }
}
} // namespace

namespace {
Status checkScheduleSize(std::uint64_t stages, std::uint64_t microbatches, std::uint64_t ranks) {
  if (stages == 0 || microbatches == 0 || ranks == 0)
    return Error(ErrorCode::InvalidArgument) << "stages, microbatches and ranks must be positive";
  if (stages > kMaxScheduleStages || ranks > kMaxScheduleRanks || microbatches > kMaxScheduleMicrobatches ||
      stages * microbatches > kMaxScheduleStageMicrobatches)
    return Error(ErrorCode::InvalidArgument)
           << "schedule too large: " << stages << " stages, " << microbatches << " microbatches, " << ranks
           << " ranks (limits: " << kMaxScheduleStages << " stages, " << kMaxScheduleMicrobatches << " microbatches, "
           << kMaxScheduleRanks << " ranks, " << kMaxScheduleStageMicrobatches << " stages x microbatches)";
  return {};
}
} // namespace

Expected<Schedule> generateSchedule(ScheduleKind kind, std::uint32_t stages, std::uint32_t microbatches,
                                    std::uint32_t ranks) {
  CLEAVE_CHECK(checkScheduleSize(stages, microbatches, ranks));
  if (stages % ranks != 0)
    return Error(ErrorCode::InvalidArgument) << stages << " stages do not divide over " << ranks << " ranks";
  bool single = kind == ScheduleKind::GPipe || kind == ScheduleKind::OneFOneB || kind == ScheduleKind::ZeroBubble;
  if (single && stages != ranks)
    return Error(ErrorCode::InvalidArgument) << kScheduleKinds.name(kind) << " runs one stage per rank (" << stages
                                             << " stages on " << ranks << " ranks); use interleaved or looped_bfs";
  if (kind == ScheduleKind::Interleaved1F1B && microbatches % ranks != 0)
    return Error(ErrorCode::InvalidArgument) << "interleaved needs microbatches (" << microbatches
                                             << ") to be a multiple of the ranks (" << ranks << ")";
  if (placementOf(kind) == Placement::V && stages != 2 * ranks)
    return Error(ErrorCode::InvalidArgument) << kScheduleKinds.name(kind) << " runs two stages per rank in a V ("
                                             << stages << " stages on " << ranks << " ranks; it needs " << 2 * ranks << ")";
  if (placementOf(kind) == Placement::V && microbatches < 2 * ranks)
    return Error(ErrorCode::InvalidArgument) << kScheduleKinds.name(kind) << " needs at least 2 x ranks microbatches ("
                                             << microbatches << " on " << ranks
                                             << " ranks): its warm-up alone forwards 2 x ranks - 1 on the first rank";
  Schedule s;
  s.stages = stages;
  s.ranks = ranks;
  s.microbatches = microbatches;
  s.placement = placementOf(kind);
  s.perRank.resize(ranks);
  switch (kind) {
  case ScheduleKind::GPipe:
    for (std::uint32_t r = 0; r < ranks; ++r) {
      for (std::uint32_t m = 0; m < microbatches; ++m)
        s.perRank[r].push_back({r, A::Forward, m});
      for (std::uint32_t m = 0; m < microbatches; ++m)
        s.perRank[r].push_back({r, A::Backward, m});
    }
    break;
  case ScheduleKind::OneFOneB: oneFOneB(s); break;
  case ScheduleKind::Interleaved1F1B: interleaved(s); break;
  case ScheduleKind::LoopedBFS: loopedBfs(s); break;
  case ScheduleKind::ZeroBubble: zeroBubble(s); break;
  case ScheduleKind::ZeroBubbleV: zeroBubbleV(s); break;
  case ScheduleKind::DualPipeV: dualPipeV(s); break;
  }
  return s;
}

Schedule withCommunication(const Schedule& schedule) {
  Schedule out = schedule;
  for (auto& actions : out.perRank)
    actions.clear();
  for (std::uint32_t r = 0; r < schedule.ranks; ++r)
    for (const Action& a : schedule.perRank[r]) {
      bool isBackward = a.type == A::Backward || a.type == A::BackwardInput;
      if (a.type == A::Forward && a.stage > 0 && schedule.rankOf(a.stage - 1) != r)
        out.perRank[r].push_back({a.stage, A::RecvF, a.microbatch});
      if (isBackward && a.stage + 1 < schedule.stages && schedule.rankOf(a.stage + 1) != r)
        out.perRank[r].push_back({a.stage, A::RecvB, a.microbatch});
      out.perRank[r].push_back(a);
      if (a.type == A::Forward && a.stage + 1 < schedule.stages && schedule.rankOf(a.stage + 1) != r)
        out.perRank[r].push_back({a.stage, A::SendF, a.microbatch});
      if (isBackward && a.stage > 0 && schedule.rankOf(a.stage - 1) != r)
        out.perRank[r].push_back({a.stage, A::SendB, a.microbatch});
    }
  return out;
}

std::vector<Action> rankComputeActions(const Schedule* schedule, std::uint32_t stages, std::uint32_t microbatches,
                                       std::uint32_t ranks, std::uint32_t rank, bool backward) {
  using A = ActionType;
  std::vector<Action> actions;
  if (schedule) {
    for (const Action& action : schedule->perRank[rank])
      if (action.type == A::Forward || (backward && isCompute(action.type)))
        actions.push_back(action);
    return actions;
  }
  auto runsHere = [&](std::uint32_t s) { return stageRank(s, static_cast<int>(ranks)) == static_cast<int>(rank); };
  for (std::uint32_t m = 0; m < microbatches; ++m)
    for (std::uint32_t s = 0; s < stages; ++s)
      if (runsHere(s))
        actions.push_back({s, A::Forward, m});
  for (std::uint32_t m = 0; backward && m < microbatches; ++m)
    for (std::uint32_t s = stages; s-- > 0;)
      if (runsHere(s))
        actions.push_back({s, A::Backward, m});
  return actions;
}

std::string formatCsv(const Schedule& schedule) {
  std::string text;
  for (const auto& actions : schedule.perRank) {
    for (std::size_t i = 0; i < actions.size(); ++i)
      text += (i ? "," : "") + formatAction(actions[i]);
    text += "\n";
  }
  return text;
}

namespace {
// The placement every action of `s` runs on: V when it fits and loop does not, else loop (the
// validator then names an action on the wrong rank).
Placement placementOfActions(const Schedule& s) {
  auto fits = [&](Placement placement) {
    for (std::uint32_t r = 0; r < s.ranks; ++r)
      for (const Action& action : s.perRank[r])
        if (stageRank(action.stage, static_cast<int>(s.ranks), placement) != static_cast<int>(r))
          return false;
    return true;
  };
  return !fits(Placement::Loop) && fits(Placement::V) ? Placement::V : Placement::Loop;
}
} // namespace

Expected<Schedule> parseCsv(std::string_view text, std::uint32_t stages, std::uint32_t microbatches) {
  Schedule s;
  std::uint32_t maxStage = 0, maxMicrobatch = 0;
  bool any = false;
  std::size_t line = 0;
  for (std::string_view row : splitString(text, '\n')) {
    ++line;
    if (!row.empty() && row.back() == '\r')
      row.remove_suffix(1);
    if (row.empty())
      continue;
    if (s.perRank.size() == kMaxScheduleRanks)
      return Error(ErrorCode::InvalidArgument) << "line " << line << ": more than " << kMaxScheduleRanks
                                               << " ranks (one line of actions per rank)";
    auto& actions = s.perRank.emplace_back();
    for (std::string_view cell : splitString(row, ',')) {
      while (!cell.empty() && (cell.front() == ' ' || cell.front() == '\t'))
        cell.remove_prefix(1);
      while (!cell.empty() && (cell.back() == ' ' || cell.back() == '\t'))
        cell.remove_suffix(1);
      if (cell.empty())
        continue; // an idle step
      Expected<Action> action = parseAction(cell);
      if (!action)
        return std::move(action.error().withContext("line " + std::to_string(line)));
      actions.push_back(*action);
      maxStage = std::max(maxStage, action->stage);
      maxMicrobatch = std::max(maxMicrobatch, action->microbatch);
      any = true;
    }
  }
  if (s.perRank.empty() || !any)
    return Error(ErrorCode::ParseError) << "a schedule CSV needs one line of actions per rank";
  std::uint64_t ranks = s.perRank.size();
  std::uint64_t stageCount = stages ? stages : std::uint64_t{maxStage} + 1;
  std::uint64_t microbatchCount = microbatches ? microbatches : std::uint64_t{maxMicrobatch} + 1;
  CLEAVE_CHECK(checkScheduleSize(stageCount, microbatchCount, ranks));
  s.ranks = static_cast<std::uint32_t>(ranks);
  s.stages = static_cast<std::uint32_t>(stageCount);
  s.microbatches = static_cast<std::uint32_t>(microbatchCount);
  if (s.stages % s.ranks != 0)
    return Error(ErrorCode::InvalidArgument) << s.stages << " stages do not divide over " << s.ranks << " ranks";
  s.placement = placementOfActions(s);
  return s;
}

} // namespace cleave::pipeline
