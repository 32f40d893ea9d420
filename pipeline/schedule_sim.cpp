#include "pipeline/schedule_sim.h"

#include <algorithm>
#include <sstream>

namespace cleave::pipeline {

namespace {
using A = ActionType;

// Completion times per (stage, microbatch, action type); < 0: not done.
class Ledger {
public:
  Ledger(std::uint32_t stages, std::uint32_t microbatches)
      : microbatches_(microbatches), times_(static_cast<std::size_t>(stages) * microbatches * kActionTypes, -1.0) {}
  double& at(std::uint32_t stage, std::uint32_t microbatch, A type) {
    return times_[(static_cast<std::size_t>(stage) * microbatches_ + microbatch) * kActionTypes + static_cast<int>(type)];
  }
  bool done(std::uint32_t stage, std::uint32_t microbatch, A type) { return at(stage, microbatch, type) >= 0; }

private:
  std::uint32_t microbatches_;
  std::vector<double> times_;
};

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

// Plays the schedule; with `options`, in time.
Expected<SimulationResult> play(const Schedule& s, const SimulationOptions* options) {
  CLEAVE_CHECK(checkActions(s));
  bool explicitComm = s.hasCommunication();
  Ledger ledger(s.stages, s.microbatches);
  auto costOf = [&](const Action& a) -> const StageCosts& {
    static const StageCosts defaults;
    if (!options || options->stages.empty())
      return defaults;
    return options->stages.size() == 1 ? options->stages[0] : options->stages[a.stage];
  };
  double latency = options ? options->transferLatency : 0.0;
  SimulationResult result;
  result.busy.assign(s.ranks, 0.0);
  result.peakActivationBytes.assign(s.ranks, 0);
  std::vector<std::int64_t> live(s.ranks, 0);
  std::vector<double> clock(s.ranks, 0.0);
  std::vector<std::size_t> next(s.ranks, 0);
  std::size_t remaining = 0;
  for (const auto& actions : s.perRank)
    remaining += actions.size();
  auto backwardDone = [&](std::uint32_t stage, std::uint32_t m) -> double {
    double b = ledger.at(stage, m, A::Backward), i = ledger.at(stage, m, A::BackwardInput);
    return b >= 0 ? b : i;
  };
  // When the action's inputs are available (<0: not yet).
  auto readyAt = [&](std::uint32_t rank, const Action& a) -> double {
    auto crossRank = [&](std::uint32_t other) { return s.rankOf(other) != rank; };
    switch (a.type) {
    case A::Forward: {
      if (a.stage == 0)
        return 0.0;
      if (explicitComm && crossRank(a.stage - 1))
        return ledger.at(a.stage, a.microbatch, A::RecvF);
      double t = ledger.at(a.stage - 1, a.microbatch, A::Forward);
      return t < 0 ? t : t + (crossRank(a.stage - 1) ? latency : 0.0);
    }
    case A::Backward:
    case A::BackwardInput: {
      double own = ledger.at(a.stage, a.microbatch, A::Forward);
      if (own < 0)
        return -1.0;
      if (a.stage + 1 == s.stages)
        return own;
      if (explicitComm && crossRank(a.stage + 1)) {
        double t = ledger.at(a.stage, a.microbatch, A::RecvB);
        return t < 0 ? t : std::max(own, t);
      }
      double t = backwardDone(a.stage + 1, a.microbatch);
      return t < 0 ? t : std::max(own, t + (crossRank(a.stage + 1) ? latency : 0.0));
    }
    case A::BackwardWeight: return ledger.at(a.stage, a.microbatch, A::BackwardInput);
    case A::SendF: return ledger.at(a.stage, a.microbatch, A::Forward);
    case A::SendB: return backwardDone(a.stage, a.microbatch);
    case A::RecvF: {
      if (a.stage == 0)
        return -1.0;
      double t = ledger.at(a.stage - 1, a.microbatch, A::SendF);
      return t < 0 ? t : t + latency;
    }
    case A::RecvB: {
      if (a.stage + 1 >= s.stages)
        return -1.0;
      double t = ledger.at(a.stage + 1, a.microbatch, A::SendB);
      return t < 0 ? t : t + latency;
    }
    }
    return -1.0;
  };
  auto durationOf = [&](const Action& a) {
    const StageCosts& c = costOf(a);
    switch (a.type) {
    case A::Forward: return c.forward;
    case A::Backward: return c.backward;
    case A::BackwardInput: return c.backwardInput;
    case A::BackwardWeight: return c.backwardWeight;
    default: return 0.0;
    }
  };
  while (remaining > 0) {
    bool moved = false;
    for (std::uint32_t r = 0; r < s.ranks; ++r) {
      while (next[r] < s.perRank[r].size()) {
        const Action& a = s.perRank[r][next[r]];
        double ready = readyAt(r, a);
        if (ready < 0)
          break;
        double start = std::max(clock[r], ready), end = start + (options ? durationOf(a) : 1.0);
        ledger.at(a.stage, a.microbatch, a.type) = end;
        clock[r] = end;
        ++next[r];
        --remaining;
        moved = true;
        if (options) {
          result.busy[r] += end - start;
          std::int64_t bytes = costOf(a).activationBytes;
          if (a.type == A::Forward)
            result.peakActivationBytes[r] = std::max(result.peakActivationBytes[r], live[r] += bytes);
          else if (a.type == A::Backward || a.type == A::BackwardWeight)
            live[r] -= bytes;
          result.timeline.push_back({r, a, start, end});
        }
      }
    }
    if (!moved) {
      std::ostringstream blocked;
      for (std::uint32_t r = 0; r < s.ranks; ++r)
        if (next[r] < s.perRank[r].size())
          blocked << (blocked.tellp() > 0 ? ", " : "") << "rank " << r << " at " << formatAction(s.perRank[r][next[r]]);
      return Error(ErrorCode::InvalidArgument) << "the schedule deadlocks: " << blocked.str();
    }
  }
  if (options) {
    for (double c : clock)
      result.makespan = std::max(result.makespan, c);
    double busy = 0.0;
    for (double b : result.busy)
      busy += b;
    result.bubbleFraction = result.makespan > 0 ? 1.0 - busy / (result.makespan * s.ranks) : 0.0;
  }
  return result;
}
} // namespace

Status validateSchedule(const Schedule& schedule) {
  CLEAVE_TRY(SimulationResult ignored, play(schedule, nullptr));
  (void)ignored;
  return {};
}

Expected<SimulationResult> simulateSchedule(const Schedule& schedule, const SimulationOptions& options) {
  if (!options.stages.empty() && options.stages.size() != 1 && options.stages.size() != schedule.stages)
    return Error(ErrorCode::InvalidArgument) << options.stages.size() << " stage costs for " << schedule.stages
                                             << " stages";
  return play(schedule, &options);
}

} // namespace cleave::pipeline
