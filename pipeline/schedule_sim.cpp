#include "pipeline/schedule_sim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <set>
#include <sstream>
#include <unordered_map>

namespace cleave::pipeline {

namespace {
using A = ActionType;

// Completion times per (stage, microbatch, action type); < 0: not done.
class Ledger {
public:
  Ledger(std::uint32_t stages, std::uint32_t microbatches)
      : microbatches_(microbatches), times_(static_cast<std::size_t>(stages) * microbatches * kActionTypes, -1.0) {}
  double& at(std::uint32_t stage, std::uint32_t microbatch, A type) { return times_[index(stage, microbatch, type)]; }
  double at(std::uint32_t stage, std::uint32_t microbatch, A type) const {
    return times_[index(stage, microbatch, type)];
  }
  bool done(std::uint32_t stage, std::uint32_t microbatch, A type) { return at(stage, microbatch, type) >= 0; }

private:
  std::size_t index(std::uint32_t stage, std::uint32_t microbatch, A type) const {
    return (static_cast<std::size_t>(stage) * microbatches_ + microbatch) * kActionTypes + static_cast<int>(type);
  }
  std::uint32_t microbatches_;
  std::vector<double> times_;
};

// splitmix64's finalizer: a well-mixed 64-bit value of x.
std::uint64_t mixBits(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A lognormal factor with median 1 and coefficient of variation `spread` for one action under
// `seed`: a standard normal from two uniforms (Box-Muller) hashed from (seed, action), so it does
// not depend on the order actions are played in.
double spreadFactor(double spread, std::uint64_t seed, const Action& a) {
  const std::uint64_t action =
      (std::uint64_t{a.stage} << 40) ^ (std::uint64_t{a.microbatch} << 8) ^ static_cast<std::uint64_t>(a.type);
  const std::uint64_t key = mixBits(seed ^ mixBits(action));
  auto uniform = [](std::uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }; // (0, 1)
  const double radius = std::sqrt(-2.0 * std::log(uniform(mixBits(key))));
  const double normal = radius * std::cos(2.0 * std::numbers::pi * uniform(mixBits(key + 1)));
  return std::exp(std::sqrt(std::log1p(spread * spread)) * normal); // sigma of the log from the variation
}

Status checkActions(const Schedule& s) {
  if (s.ranks == 0 || s.perRank.size() != s.ranks || s.stages == 0 || s.microbatches == 0)
    return Error(ErrorCode::InvalidArgument) << "a schedule needs stages, ranks and microbatches";
  std::vector<std::uint8_t> seen(static_cast<std::size_t>(s.stages) * s.microbatches * kActionTypes, 0);
  for (std::uint32_t r = 0; r < s.ranks; ++r)
    for (const Action& a : s.perRank[r]) {
      if (a.stage >= s.stages || a.microbatch >= s.microbatches)
        return Error(ErrorCode::InvalidArgument) << "rank " << r << ": " << formatAction(a) << " is out of range ("
                                                 << s.stages << " stages, " << s.microbatches << " microbatches)";
      if (s.rankOf(a.stage) != r)
        return Error(ErrorCode::InvalidArgument) << "rank " << r << ": " << formatAction(a) << " belongs to rank "
                                                 << s.rankOf(a.stage);
      std::uint8_t& count = seen[(static_cast<std::size_t>(a.stage) * s.microbatches + a.microbatch) * kActionTypes +
                                 static_cast<int>(a.type)];
      if (++count > 1)
        return Error(ErrorCode::InvalidArgument) << "rank " << r << ": " << formatAction(a) << " appears twice";
    }
  for (std::uint32_t st = 0; st < s.stages; ++st)
    for (std::uint32_t m = 0; m < s.microbatches; ++m) {
      auto has = [&](A t) {
        return seen[(static_cast<std::size_t>(st) * s.microbatches + m) * kActionTypes + static_cast<int>(t)] != 0;
      };
      std::string id = std::to_string(st) + "?" + std::to_string(m);
      if (!has(A::Forward))
        return Error(ErrorCode::InvalidArgument) << "no forward " << st << "F" << m;
      bool full = has(A::Backward), split = has(A::BackwardInput) || has(A::BackwardWeight);
      if (full && split)
        return Error(ErrorCode::InvalidArgument) << "stage " << st << " microbatch " << m << " has both B and I/W";
      if (!full && !(has(A::BackwardInput) && has(A::BackwardWeight)))
        return Error(ErrorCode::InvalidArgument) << "no backward for stage " << st << " microbatch " << m
                                                 << " (B, or I and W)";
    }
  return {};
}

// Plays a checked schedule: each rank runs its actions in order, an action as soon as its inputs
// are ready (readyAt) and its rank is free. Without options every action takes one unit and no
// costs are recorded (validation only).
class Player {
public:
  Player(const Schedule& s, const SimulationOptions* options, SendSemantics sends = SendSemantics::Buffered)
      : s_(s), options_(options), explicitComm_(s.hasCommunication()), latency_(options ? options->transferLatency : 0.0),
        rendezvous_(sends == SendSemantics::Rendezvous && explicitComm_), ledger_(s.stages, s.microbatches),
        actionCost_(s.stages, s.microbatches), live_(s.ranks, 0), gradientsMade_(s.stages, 0), clock_(s.ranks, 0.0),
        next_(s.ranks, 0) {
    if (options) // checked by simulateSchedule: in range, compute actions, finite and >= 0
      for (const auto& [action, cost] : options->actionCosts)
        actionCost_.at(action.stage, action.microbatch, action.type) = cost;
    result_.busy.assign(s.ranks, 0.0);
    result_.peakActivationBytes.assign(s.ranks, 0);
    if (rendezvous_)
      indexReceives();
  }

  Expected<SimulationResult> play() {
    std::size_t remaining = 0;
    for (const auto& actions : s_.perRank)
      remaining += actions.size();
    while (remaining > 0) {
      std::size_t moved = 0;
      for (std::uint32_t r = 0; r < s_.ranks; ++r)
        moved += advance(r);
      if (moved == 0)
        return deadlock();
      remaining -= moved;
    }
    if (options_)
      summarize();
    return std::move(result_);
  }

private:
  // Whether rank r's next two actions play as one F&B block (SimulationOptions::pairCost).
  bool nextIsPair(std::uint32_t r) const {
    const std::vector<Action>& actions = s_.perRank[r];
    const std::size_t k = next_[r];
    return options_ && options_->pairCost > 0 && k + 1 < actions.size() && actions[k].type == A::Forward &&
           actions[k + 1].type == A::Backward && actions[k + 1].stage != actions[k].stage;
  }

  // Plays rank r's F&B block once both halves have their inputs; false when one has not.
  bool advancePair(std::uint32_t r) {
    const Action& f = s_.perRank[r][next_[r]];
    const Action& b = s_.perRank[r][next_[r] + 1];
    const double readyF = readyAt(r, f), readyB = readyAt(r, b);
    if (readyF < 0 || readyB < 0)
      return false;
    const double start = std::max({clock_[r], readyF, readyB}) + implicitReceiveTime(r, f) + implicitReceiveTime(r, b);
    const double end = start + options_->pairCost;
    const double free = end + implicitSendTime(r, f) + implicitSendTime(r, b);
    const double forwardShare = computeCostOf(f) / std::max(computeCostOf(f) + computeCostOf(b), 1e-300);
    ledger_.at(f.stage, f.microbatch, f.type) = ledger_.at(b.stage, b.microbatch, b.type) = free;
    clock_[r] = free;
    next_[r] += 2;
    if (rendezvous_ && next_[r] < s_.perRank[r].size())
      reachedAt_[r][next_[r]] = free;
    const double middle = start + options_->pairCost * forwardShare; // the block's compute, split for the record
    record(r, f, start, middle);
    record(r, b, middle, end);
    return true;
  }

  // Runs rank r's actions until one is not ready; returns how many ran.
  std::size_t advance(std::uint32_t r) {
    std::size_t ran = 0;
    while (next_[r] < s_.perRank[r].size()) {
      if (nextIsPair(r)) {
        if (!advancePair(r))
          break;
        ran += 2;
        continue;
      }
      const Action& a = s_.perRank[r][next_[r]];
      double ready = readyAt(r, a);
      if (ready < 0)
        break;
      // The rank reads what the action receives from other ranks before it computes.
      double start = std::max(clock_[r], ready) + (options_ ? implicitReceiveTime(r, a) : 0.0);
      double end = start + (options_ ? durationOf(a) : 1.0);
      // The rank writes what the action sends to other ranks before it moves on, and the
      // message leaves after that.
      double free = end + (options_ ? implicitSendTime(r, a) : 0.0);
      ledger_.at(a.stage, a.microbatch, a.type) = free;
      clock_[r] = free;
      ++next_[r];
      if (rendezvous_ && next_[r] < s_.perRank[r].size())
        reachedAt_[r][next_[r]] = free;
      ++ran;
      if (options_)
        record(r, a, start, end);
    }
    return ran;
  }

  void record(std::uint32_t r, const Action& a, double start, double end) {
    if (isCompute(a.type))
      result_.busy[r] += end - start; // compute only: a send's or receive's time is communication
    const StageCosts& cost = costOf(a);
    auto hold = [&](std::int64_t bytes) {
      result_.peakActivationBytes[r] = std::max(result_.peakActivationBytes[r], live_[r] += bytes);
    };
    const HeldBytes held = heldBytes(cost);
    if (a.type == A::Forward)
      hold(held.afterForward);
    else if (a.type == A::Backward || a.type == A::BackwardInput)
      hold(held.madeAgain);
    if (isCompute(a.type) && a.type != A::Forward) { // a backward's working bytes, while it runs
      hold(cost.backwardBytes);
      live_[r] -= cost.backwardBytes;
    }
    if ((a.type == A::Backward || a.type == A::BackwardWeight) && !gradientsMade_[a.stage]) {
      gradientsMade_[a.stage] = 1; // the parameters' gradients, kept to the step's end
      hold(cost.gradientBytes);
    }
    if (a.type == A::Backward || a.type == A::BackwardWeight)
      live_[r] -= held.afterForward + held.madeAgain;
    result_.timeline.push_back({r, a, start, end});
  }

  // What one microbatch's F holds until its backward, and what B (or I) makes again first.
  struct HeldBytes {
    std::int64_t afterForward = 0, madeAgain = 0;
  };
  HeldBytes heldBytes(const StageCosts& cost) const {
    switch (options_ ? options_->recompute : Recompute::None) {
    case Recompute::Stage: return {cost.inputBytes, cost.activationBytes};
    case Recompute::Selective: return {cost.activationBytes - cost.droppedBytes, cost.droppedBytes};
    case Recompute::None: break;
    }
    return {cost.activationBytes, 0};
  }
  static double recomputeTime(const StageCosts& cost, Recompute model) {
    return model == Recompute::Stage ? cost.forward : model == Recompute::Selective ? cost.replay : 0.0;
  }

  Error deadlock() const {
    std::ostringstream blocked;
    for (std::uint32_t r = 0; r < s_.ranks; ++r)
      if (next_[r] < s_.perRank[r].size())
        blocked << (blocked.tellp() > 0 ? ", " : "") << "rank " << r << " at " << formatAction(s_.perRank[r][next_[r]]);
    return Error(ErrorCode::InvalidArgument) << "the schedule deadlocks: " << blocked.str();
  }

  void summarize() {
    for (double c : clock_)
      result_.makespan = std::max(result_.makespan, c);
    double busy = 0.0;
    for (double b : result_.busy)
      busy += b;
    result_.bubbleFraction = result_.makespan > 0 ? 1.0 - busy / (result_.makespan * s_.ranks) : 0.0;
  }

  const StageCosts& costOf(const Action& a) const {
    static const StageCosts defaults;
    if (!options_ || options_->stages.empty())
      return defaults;
    return options_->stages.size() == 1 ? options_->stages[0] : options_->stages[a.stage];
  }

  double durationOf(const Action& a) const {
    if (!isCompute(a.type))
      return a.type == A::SendF || a.type == A::SendB ? options_->sendCost : options_->receiveCost;
    const double cost = computeCostOf(a);
    return options_->costSpread > 0 ? cost * spreadFactor(options_->costSpread, options_->spreadSeed, a) : cost;
  }

  // An F, B, I or W's cost: its own (actionCosts), else its stage's.
  double computeCostOf(const Action& a) const {
    if (double own = actionCost_.at(a.stage, a.microbatch, a.type); own >= 0)
      return own;
    const StageCosts& c = costOf(a);
    const double again = options_ ? recomputeTime(c, options_->recompute) : 0.0;
    switch (a.type) {
    case A::Forward: return c.forward;
    case A::Backward: return again + c.backward;
    case A::BackwardInput: return again + c.backwardInput;
    default: return c.backwardWeight;
    }
  }

  // Without SEND actions: the sender's time for the messages `a` sends to other ranks (a forward
  // to the next stage, a backward's input gradient to the previous one; one message each).
  double implicitSendTime(std::uint32_t rank, const Action& a) const {
    if (explicitComm_ || options_->sendCost == 0.0)
      return 0.0;
    bool sends = (a.type == A::Forward && a.stage + 1 < s_.stages && crossRank(rank, a.stage + 1)) ||
                 ((a.type == A::Backward || a.type == A::BackwardInput) && a.stage > 0 && crossRank(rank, a.stage - 1));
    return sends ? options_->sendCost : 0.0;
  }

  // Without RECV actions: the receiver's time for the messages `a` consumes from other ranks (a
  // forward's input from the previous stage, a backward's output gradient from the next one).
  double implicitReceiveTime(std::uint32_t rank, const Action& a) const {
    if (explicitComm_ || options_->receiveCost == 0.0)
      return 0.0;
    bool receives = (a.type == A::Forward && a.stage > 0 && crossRank(rank, a.stage - 1)) ||
                    ((a.type == A::Backward || a.type == A::BackwardInput) && a.stage + 1 < s_.stages &&
                     crossRank(rank, a.stage + 1));
    return receives ? options_->receiveCost : 0.0;
  }

  double backwardDone(std::uint32_t stage, std::uint32_t m) {
    double b = ledger_.at(stage, m, A::Backward), i = ledger_.at(stage, m, A::BackwardInput);
    return b >= 0 ? b : i;
  }
  bool crossRank(std::uint32_t rank, std::uint32_t otherStage) const { return s_.rankOf(otherStage) != rank; }
  // `t` (< 0: not yet) plus the transfer latency when it comes from another rank.
  double arrival(double t, bool fromOtherRank) const { return t < 0 ? t : t + (fromOtherRank ? latency_ : 0.0); }

  // When the action's inputs are available (< 0: not yet).
  double readyAt(std::uint32_t rank, const Action& a) {
    switch (a.type) {
    case A::Forward: return forwardReadyAt(rank, a);
    case A::Backward:
    case A::BackwardInput: return backwardReadyAt(rank, a);
    case A::BackwardWeight: return ledger_.at(a.stage, a.microbatch, A::BackwardInput);
    case A::SendF: return rendezvousAt(a, ledger_.at(a.stage, a.microbatch, A::Forward));
    case A::SendB: return rendezvousAt(a, backwardDone(a.stage, a.microbatch));
    case A::RecvF:
      return a.stage == 0 ? -1.0 : arrival(ledger_.at(a.stage - 1, a.microbatch, A::SendF), true);
    case A::RecvB:
      return a.stage + 1 >= s_.stages ? -1.0 : arrival(ledger_.at(a.stage + 1, a.microbatch, A::SendB), true);
    }
    return -1.0;
  }

  // Rendezvous: a send whose data is ready at `ready` completes once its receive is posted (its
  // rank has reached it); Buffered: at `ready`.
  double rendezvousAt(const Action& send, double ready) {
    if (!rendezvous_ || ready < 0)
      return ready;
    Action receive = send.type == A::SendF ? Action{send.stage + 1, A::RecvF, send.microbatch}
                                           : Action{send.stage - 1, A::RecvB, send.microbatch};
    auto found = receiveAt_.find(key(receive));
    if (found == receiveAt_.end())
      return -1.0; // never received: blocks for ever
    auto [rank, index] = found->second;
    return next_[rank] >= index ? std::max(ready, reachedAt_[rank][index]) : -1.0;
  }

  static std::uint64_t key(const Action& a) {
    return (static_cast<std::uint64_t>(a.stage) << 36) | (static_cast<std::uint64_t>(a.microbatch) << 4) |
           static_cast<std::uint64_t>(a.type);
  }

  void indexReceives() {
    reachedAt_.resize(s_.ranks);
    for (std::uint32_t r = 0; r < s_.ranks; ++r) {
      reachedAt_[r].assign(s_.perRank[r].size(), 0.0);
      for (std::size_t i = 0; i < s_.perRank[r].size(); ++i) {
        const Action& a = s_.perRank[r][i];
        if (a.type == A::RecvF || a.type == A::RecvB)
          receiveAt_[key(a)] = {r, i};
      }
    }
  }

  double forwardReadyAt(std::uint32_t rank, const Action& a) {
    if (a.stage == 0)
      return 0.0;
    if (explicitComm_ && crossRank(rank, a.stage - 1))
      return ledger_.at(a.stage, a.microbatch, A::RecvF);
    return arrival(ledger_.at(a.stage - 1, a.microbatch, A::Forward), crossRank(rank, a.stage - 1));
  }

  // After the stage's own forward and the next stage's backward (the last stage: its forward).
  double backwardReadyAt(std::uint32_t rank, const Action& a) {
    double own = ledger_.at(a.stage, a.microbatch, A::Forward);
    if (own < 0 || a.stage + 1 == s_.stages)
      return own < 0 ? -1.0 : own;
    double t = explicitComm_ && crossRank(rank, a.stage + 1)
                   ? ledger_.at(a.stage, a.microbatch, A::RecvB)
                   : arrival(backwardDone(a.stage + 1, a.microbatch), crossRank(rank, a.stage + 1));
    return t < 0 ? t : std::max(own, t);
  }

  const Schedule& s_;
  const SimulationOptions* options_;
  bool explicitComm_;
  double latency_;
  bool rendezvous_;
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::size_t>> receiveAt_; // RECV -> (rank, index)
  std::vector<std::vector<double>> reachedAt_; // when each rank reached each of its actions (rendezvous)
  Ledger ledger_;
  Ledger actionCost_; // options' actionCosts by (stage, microbatch, type); < 0: the stage's cost
  SimulationResult result_;
  std::vector<std::int64_t> live_;
  std::vector<std::uint8_t> gradientsMade_; // per stage: a B or W made its parameters' gradients
  std::vector<double> clock_;
  std::vector<std::size_t> next_;
};

// Plays the schedule; with `options`, in time.
Expected<SimulationResult> play(const Schedule& s, const SimulationOptions* options,
                                SendSemantics sends = SendSemantics::Buffered) {
  CLEAVE_CHECK(checkActions(s));
  return Player(s, options, sends).play();
}

// A message by what it carries: (kind, receiving stage, microbatch), as "2F1" / "0B3".
struct Message {
  bool backward = false;
  std::uint32_t stage = 0, microbatch = 0;
  friend bool operator==(const Message&, const Message&) = default;
};

std::string formatMessage(const Message& m) {
  return std::to_string(m.stage) + (m.backward ? "B" : "F") + std::to_string(m.microbatch);
}

// Each channel's (sender, receiver) messages in the order its sender sends and its receiver
// receives them must agree.
Status checkChannelOrder(const Schedule& s) {
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<Message>> sent, received;
  for (std::uint32_t r = 0; r < s.ranks; ++r)
    for (const Action& a : s.perRank[r]) {
      if (a.type == A::SendF && a.stage + 1 < s.stages)
        sent[{r, s.rankOf(a.stage + 1)}].push_back({false, a.stage + 1, a.microbatch});
      else if (a.type == A::SendB && a.stage > 0)
        sent[{r, s.rankOf(a.stage - 1)}].push_back({true, a.stage - 1, a.microbatch});
      else if (a.type == A::RecvF && a.stage > 0)
        received[{s.rankOf(a.stage - 1), r}].push_back({false, a.stage, a.microbatch});
      else if (a.type == A::RecvB && a.stage + 1 < s.stages)
        received[{s.rankOf(a.stage + 1), r}].push_back({true, a.stage, a.microbatch});
    }
  std::set<std::pair<std::uint32_t, std::uint32_t>> channels;
  for (const auto& entry : sent)
    channels.insert(entry.first);
  for (const auto& entry : received)
    channels.insert(entry.first);
  for (const auto& channel : channels) {
    const std::vector<Message>& out = sent[channel];
    const std::vector<Message>& in = received[channel];
    for (std::size_t k = 0; k < std::max(out.size(), in.size()); ++k) {
      if (k < out.size() && k < in.size() && out[k] == in[k])
        continue;
      auto what = [&](const std::vector<Message>& list) {
        return k < list.size() ? formatMessage(list[k]) : std::string("nothing");
      };
      return Error(ErrorCode::InvalidArgument) << "channel rank " << channel.first << " -> rank " << channel.second
                                               << ": message " << k << " is sent as " << what(out) << " but received as "
                                               << what(in) << " (an untagged transport such as NCCL pairs them in order)";
    }
  }
  return {};
}
} // namespace

Status validateSchedule(const Schedule& schedule, const ValidationOptions& options) {
  CLEAVE_TRY(SimulationResult ignored, play(schedule, nullptr, options.sends));
  (void)ignored;
  if (options.orderedChannels)
    CLEAVE_CHECK(checkChannelOrder(schedule));
  return {};
}

Expected<SimulationResult> simulateSchedule(const Schedule& schedule, const SimulationOptions& options) {
  if (!options.stages.empty() && options.stages.size() != 1 && options.stages.size() != schedule.stages)
    return Error(ErrorCode::InvalidArgument) << options.stages.size() << " stage costs for " << schedule.stages
                                             << " stages";
  for (const auto& [action, cost] : options.actionCosts) {
    if (!isCompute(action.type) || action.stage >= schedule.stages || action.microbatch >= schedule.microbatches)
      return Error(ErrorCode::InvalidArgument) << "a cost for " << formatAction(action)
                                               << ", which is not an F, B, I or W of " << schedule.stages
                                               << " stages and " << schedule.microbatches << " microbatches";
    if (!std::isfinite(cost) || cost < 0)
      return Error(ErrorCode::InvalidArgument) << "the cost of " << formatAction(action) << " is " << cost
                                               << ", not a non-negative number";
  }
  for (const StageCosts& stage : options.stages)
    if (stage.activationBytes < 0 || stage.inputBytes < 0 || stage.droppedBytes < 0 || stage.backwardBytes < 0 ||
        stage.gradientBytes < 0 ||
        stage.droppedBytes > stage.activationBytes || !std::isfinite(stage.replay) || stage.replay < 0)
      return Error(ErrorCode::InvalidArgument)
             << "a stage's bytes and replay time must be non-negative, and its dropped bytes at most its activation "
                "bytes (activation "
             << stage.activationBytes << ", input " << stage.inputBytes << ", dropped " << stage.droppedBytes
             << ", replay " << stage.replay << ")";
  if (!std::isfinite(options.costSpread) || options.costSpread < 0)
    return Error(ErrorCode::InvalidArgument) << "a cost spread of " << options.costSpread
                                             << ", not a non-negative number";
  if (!std::isfinite(options.pairCost) || options.pairCost < 0)
    return Error(ErrorCode::InvalidArgument) << "an F&B cost of " << options.pairCost << ", not a non-negative number";
  CLEAVE_TRY(SimulationResult result, play(schedule, &options));
  if (!options.messages.empty()) {
    CLEAVE_TRY(result.peakReceiveBytes, receiveBufferPeaks(schedule, options.messages, options.receiveLookahead));
  }
  return result;
}

Expected<SimulationResult> simulateWithSpread(const Schedule& schedule, SimulationOptions options,
                                              std::uint32_t samples) {
  if (samples == 0)
    return Error(ErrorCode::InvalidArgument) << "a spread simulation needs at least one sample";
  SpreadSummary spread;
  std::optional<SimulationResult> first;
  for (std::uint32_t k = 1; k <= samples; ++k) {
    options.spreadSeed = k;
    CLEAVE_TRY(SimulationResult played, simulateSchedule(schedule, options));
    spread.meanMakespan += played.makespan / samples;
    spread.meanBubble += played.bubbleFraction / samples;
    spread.minBubble = k == 1 ? played.bubbleFraction : std::min(spread.minBubble, played.bubbleFraction);
    spread.maxBubble = k == 1 ? played.bubbleFraction : std::max(spread.maxBubble, played.bubbleFraction);
    if (!first)
      first = std::move(played);
  }
  spread.samples = samples;
  first->spread = spread;
  return std::move(*first);
}

} // namespace cleave::pipeline
