// Tests of pipeline/: balancing (PyTorch's example vector, brute force), schedules (PyTorch's
// TestSchedulePlan grid, round trips, the validator's refusals, the simulator), stage planning
// on ONNX-style graphs (markers, split points, parameters, loss, backward plan).
#include "pipeline/balance.h"
#include "pipeline/nccl_streams.h"
#include "pipeline/schedule_sim.h"
#include "pipeline/stages.h"

#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <random>

#include "testing/test_graphs.h"

namespace cleave::pipeline {
namespace {
using cleave::testing::TestGraph;

TEST(Balance, OptimalFindsTheBottleneckOf60WhereGreedyGets63) {
  std::vector<double> weights{24, 33, 6, 3, 54, 15, 12, 33};
  Expected<std::vector<std::size_t>> best = cutOptimal(weights, 4);
  ASSERT_TRUE(best);
  EXPECT_EQ(best->size(), 4u);
  EXPECT_DOUBLE_EQ(bottleneckOf(weights, *best), 60.0);
  EXPECT_GE(bottleneckOf(weights, cutGreedy(weights, 4)), 63.0);
}

// Every cut into at most K stages, the smallest bottleneck within the memory limit.
double bruteForce(const std::vector<double>& w, std::size_t k, const std::vector<std::int64_t>& mem, std::int64_t limit) {
  double best = 1e300;
  std::size_t n = w.size();
  std::function<void(std::size_t, std::size_t, double)> go = [&](std::size_t start, std::size_t used, double worst) {
    if (start == n) {
      best = std::min(best, worst);
      return;
    }
    if (used == k)
      return;
    double sum = 0;
    std::int64_t bytes = 0;
    for (std::size_t end = start + 1; end <= n; ++end) {
      sum += w[end - 1];
      bytes += mem.empty() ? 0 : mem[end - 1];
      if (limit > 0 && bytes > limit)
        break;
      go(end, used + 1, std::max(worst, sum));
    }
  };
  go(0, 0, 0.0);
  return best;
}

TEST(Balance, OptimalAgreesWithBruteForce) {
  std::mt19937 rng(11);
  int compared = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::size_t n = 1 + rng() % 10, k = 1 + rng() % 5;
    std::vector<double> w(n);
    std::vector<std::int64_t> mem(n);
    for (std::size_t i = 0; i < n; ++i) {
      w[i] = static_cast<double>(1 + rng() % 60);
      mem[i] = static_cast<std::int64_t>(1 + rng() % 20);
    }
    std::int64_t limit = trial % 2 ? static_cast<std::int64_t>(15 + rng() % 40) : 0;
    double expected = bruteForce(w, k, mem, limit);
    Expected<std::vector<std::size_t>> got = cutOptimal(w, k, mem, limit);
    if (expected > 1e299) {
      EXPECT_FALSE(got);
      continue;
    }
    ASSERT_TRUE(got) << got.error().message();
    EXPECT_DOUBLE_EQ(bottleneckOf(w, *got), expected) << "trial " << trial;
    EXPECT_LE(got->size(), k);
    for (std::size_t s = 0; s < got->size(); ++s) { // memory holds
      std::size_t end = s + 1 < got->size() ? (*got)[s + 1] : n;
      std::int64_t bytes = std::accumulate(mem.begin() + static_cast<std::ptrdiff_t>((*got)[s]),
                                           mem.begin() + static_cast<std::ptrdiff_t>(end), std::int64_t{0});
      if (limit > 0)
        EXPECT_LE(bytes, limit);
    }
    ++compared;
  }
  EXPECT_GT(compared, 300);
}

TEST(Schedule, PyTorchsPlanGridValidatesForInterleavedAndLoopedBfs) {
  // (local stages, microbatches, ranks) from PyTorch's TestSchedulePlan.test_pipeline_order.
  const std::uint32_t grid[][3] = {{2, 2, 2},  {2, 4, 4},  {2, 8, 2},  {2, 8, 4},  {2, 8, 8},   {4, 4, 4}, {4, 8, 4},
                                   {4, 8, 8},  {4, 16, 4}, {4, 32, 4}, {4, 64, 4}, {4, 16, 16}, {4, 32, 32},
                                   {4, 128, 64}, {3, 2, 2}, {3, 8, 2}, {3, 12, 4}, {4, 6, 3},  {4, 10, 5}};
  for (ScheduleKind kind : {ScheduleKind::Interleaved1F1B, ScheduleKind::LoopedBFS})
    for (const auto& [local, microbatches, ranks] : grid) {
      SCOPED_TRACE(std::string(kScheduleKinds.name(kind)) + " " + std::to_string(local) + "," +
                   std::to_string(microbatches) + "," + std::to_string(ranks));
      Expected<Schedule> s = generateSchedule(kind, local * ranks, microbatches, ranks);
      ASSERT_TRUE(s) << s.error().message();
      EXPECT_TRUE(validateSchedule(*s));
      Schedule withComm = withCommunication(*s);
      EXPECT_TRUE(validateSchedule(withComm));
      Expected<SimulationResult> sim = simulateSchedule(withComm);
      ASSERT_TRUE(sim);
      EXPECT_GT(sim->makespan, 0.0);
    }
}

TEST(Schedule, SingleStagePerRankKindsValidateAndRank) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubble})
    for (std::uint32_t stages : {1u, 2u, 4u, 7u})
      for (std::uint32_t microbatches : {1u, 3u, 8u, 16u}) {
        SCOPED_TRACE(std::string(kScheduleKinds.name(kind)) + " " + std::to_string(stages) + "x" +
                     std::to_string(microbatches));
        Expected<Schedule> s = generateSchedule(kind, stages, microbatches, stages);
        ASSERT_TRUE(s);
        EXPECT_TRUE(validateSchedule(withCommunication(*s)));
      }
  // 1F1B holds fewer activations than GPipe for the same makespan; zero bubble has fewer bubbles.
  auto simulate = [](ScheduleKind kind) {
    return *simulateSchedule(*generateSchedule(kind, 4, 8, 4));
  };
  SimulationResult gpipe = simulate(ScheduleKind::GPipe), oneF = simulate(ScheduleKind::OneFOneB),
                   zero = simulate(ScheduleKind::ZeroBubble);
  EXPECT_EQ(gpipe.peakActivationBytes[0], 8);
  EXPECT_EQ(oneF.peakActivationBytes[0], 4);
  EXPECT_DOUBLE_EQ(gpipe.makespan, oneF.makespan);
  EXPECT_DOUBLE_EQ(oneF.makespan, 33.0); // (M + S - 1) x (F + B) = 11 x 3
  EXPECT_LT(zero.bubbleFraction, oneF.bubbleFraction);
}

// Recomputation: a forward holds the stage's inputs only; a backward first runs the forward
// again (its cost adds F) and holds the activations until it ends.
TEST(Schedule, RecomputationHoldsInputsAndPaysAForwardAgain) {
  SimulationOptions options;
  options.stages = {StageCosts{.forward = 1.0, .backward = 2.0, .backwardInput = 1.0, .backwardWeight = 1.0,
                               .activationBytes = 100, .inputBytes = 10}};
  const Schedule gpipe = *generateSchedule(ScheduleKind::GPipe, 4, 8, 4);
  const Schedule oneF = *generateSchedule(ScheduleKind::OneFOneB, 4, 8, 4);
  const Schedule zero = *generateSchedule(ScheduleKind::ZeroBubble, 4, 8, 4);
  SimulationResult held = *simulateSchedule(gpipe, options), heldOneF = *simulateSchedule(oneF, options);
  options.recompute = Recompute::Stage;
  SimulationResult again = *simulateSchedule(gpipe, options), againOneF = *simulateSchedule(oneF, options);
  SimulationResult againZero = *simulateSchedule(zero, options);
  EXPECT_EQ(held.peakActivationBytes[0], 8 * 100);
  EXPECT_EQ(again.peakActivationBytes[0], 8 * 10 + 100); // every input, and one microbatch recomputed
  EXPECT_EQ(heldOneF.peakActivationBytes[0], 4 * 100);
  EXPECT_EQ(againOneF.peakActivationBytes[0], 4 * 10 + 100);
  EXPECT_DOUBLE_EQ(againOneF.makespan, 11 * 4.0); // (M + S - 1) x (F + F + B)
  EXPECT_DOUBLE_EQ(heldOneF.makespan, 11 * 3.0);
  for (std::int64_t bytes : againZero.peakActivationBytes) // I recomputes and W frees: never below zero
    EXPECT_GE(bytes, 110);
}

// Selective recomputation: a forward holds all but the dropped bytes; a backward (or I) first
// replays the dropped part (its cost adds the replay) and holds it until it (or W) ends.
TEST(Schedule, SelectiveRecomputationHoldsAllButTheDroppedBytesAndPaysTheReplay) {
  SimulationOptions options;
  options.stages = {StageCosts{.forward = 1.0, .backward = 2.0, .backwardInput = 1.0, .backwardWeight = 1.0,
                               .activationBytes = 100, .inputBytes = 10, .droppedBytes = 60, .replay = 0.25}};
  options.recompute = Recompute::Selective;
  const Schedule oneF = *generateSchedule(ScheduleKind::OneFOneB, 4, 8, 4);
  const Schedule zero = *generateSchedule(ScheduleKind::ZeroBubble, 4, 8, 4);
  SimulationResult selective = *simulateSchedule(oneF, options), selectiveZero = *simulateSchedule(zero, options);
  EXPECT_EQ(selective.peakActivationBytes[0], 4 * 40 + 60); // 4 in flight, one replayed
  EXPECT_DOUBLE_EQ(selective.makespan, 11 * 3.25);            // (M + S - 1) x (F + replay + B)
  for (std::int64_t bytes : selectiveZero.peakActivationBytes) // I replays and W frees: never below zero
    EXPECT_GE(bytes, 100);
  options.recompute = Recompute::None;
  EXPECT_EQ(simulateSchedule(oneF, options)->peakActivationBytes[0], 4 * 100);
  options.stages[0].backwardBytes = 7; // a backward's own, while it runs: on top of the peak
  EXPECT_EQ(simulateSchedule(oneF, options)->peakActivationBytes[0], 4 * 100 + 7);
  options.recompute = Recompute::Selective;
  EXPECT_EQ(simulateSchedule(oneF, options)->peakActivationBytes[0], 4 * 40 + 60 + 7);

  options.stages[0].droppedBytes = 101; // more than the stage makes
  options.recompute = Recompute::Selective;
  Expected<SimulationResult> refused = simulateSchedule(oneF, options);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("dropped 101"), std::string::npos) << refused.error().message();
}

// A sender's own time per cross-rank message (Gloo writes the socket on the caller's thread):
// the rank is occupied after the action that sent, the message leaves after it, and the time is
// not compute. The same with or without SEND/RECV actions.
TEST(Schedule, SendCostOccupiesTheSenderAndIsNotCompute) {
  Schedule s = *generateSchedule(ScheduleKind::OneFOneB, 2, 1, 2);
  SimulationOptions options;
  options.stages = {StageCosts{}}; // F 1, B 2
  options.sendCost = 0.5;
  for (const Schedule& schedule : {s, withCommunication(s)}) {
    SCOPED_TRACE(schedule.hasCommunication() ? "with SEND/RECV" : "implicit messages");
    Expected<SimulationResult> sim = simulateSchedule(schedule, options);
    ASSERT_TRUE(sim) << sim.error().message();
    // Rank 0: F [0, 1], sends until 1.5. Rank 1: F [1.5, 2.5], B [2.5, 4.5], sends until 5.
    // Rank 0: B [5, 7].
    EXPECT_DOUBLE_EQ(sim->makespan, 7.0);
    EXPECT_DOUBLE_EQ(sim->busy[0], 3.0);
    EXPECT_DOUBLE_EQ(sim->busy[1], 3.0);
    EXPECT_DOUBLE_EQ(sim->bubbleFraction, 1.0 - 6.0 / 14.0);
  }
  options.sendCost = 0.0; // as before: makespan (M + S - 1) x (F + B) = 6
  EXPECT_DOUBLE_EQ(simulateSchedule(s, options)->makespan, 6.0);
}

// A receiver's own time per cross-rank message (a transport thread reading the socket on the
// rank's core): the rank is occupied before the action that consumes it, and the time is not
// compute. The same with or without SEND/RECV actions; with sends costing too, both add up.
TEST(Schedule, ReceiveCostOccupiesTheReceiverAndIsNotCompute) {
  Schedule s = *generateSchedule(ScheduleKind::OneFOneB, 2, 1, 2);
  SimulationOptions options;
  options.stages = {StageCosts{}}; // F 1, B 2
  options.receiveCost = 0.25;
  for (const Schedule& schedule : {s, withCommunication(s)}) {
    SCOPED_TRACE(schedule.hasCommunication() ? "with SEND/RECV" : "implicit messages");
    Expected<SimulationResult> sim = simulateSchedule(schedule, options);
    ASSERT_TRUE(sim) << sim.error().message();
    // Rank 0: F [0, 1]. Rank 1 reads until 1.25: F [1.25, 2.25], B [2.25, 4.25]. Rank 0 reads
    // until 4.5: B [4.5, 6.5].
    EXPECT_DOUBLE_EQ(sim->makespan, 6.5);
    EXPECT_DOUBLE_EQ(sim->busy[0], 3.0);
    EXPECT_DOUBLE_EQ(sim->busy[1], 3.0);
    EXPECT_DOUBLE_EQ(sim->bubbleFraction, 1.0 - 6.0 / 13.0);
  }
  options.sendCost = 0.5; // each message: 0.5 on its sender, then 0.25 on its receiver
  EXPECT_DOUBLE_EQ(simulateSchedule(s, options)->makespan, 7.5);
  EXPECT_DOUBLE_EQ(simulateSchedule(withCommunication(s), options)->makespan, 7.5);
}

// A replay: single actions take their own measured time in place of their stage's cost, and an
// action outside the schedule, a SEND, or a negative or NaN time is refused.
TEST(Schedule, ActionCostsReplaceTheirStagesCostForThemAlone) {
  Schedule s = *generateSchedule(ScheduleKind::OneFOneB, 2, 2, 2);
  SimulationOptions options;
  options.stages = {StageCosts{}}; // F 1, B 2: makespan (M + S - 1) x (F + B) = 9
  EXPECT_DOUBLE_EQ(simulateSchedule(s, options)->makespan, 9.0);
  // Rank 1's first forward takes 4 instead of 1: everything after it waits 3 longer.
  options.actionCosts = {{Action{1, ActionType::Forward, 0}, 4.0}};
  Expected<SimulationResult> sim = simulateSchedule(s, options);
  ASSERT_TRUE(sim) << sim.error().message();
  EXPECT_DOUBLE_EQ(sim->makespan, 12.0);
  EXPECT_DOUBLE_EQ(sim->busy[1], 4.0 + 1.0 + 2.0 + 2.0);
  // The last backward on rank 0 shorter: only the end moves.
  options.actionCosts.push_back({Action{0, ActionType::Backward, 1}, 0.5});
  EXPECT_DOUBLE_EQ(simulateSchedule(s, options)->makespan, 10.5);
  for (const auto& [action, cost] : std::vector<std::pair<Action, double>>{
           {Action{2, ActionType::Forward, 0}, 1.0},
           {Action{0, ActionType::Forward, 2}, 1.0},
           {Action{0, ActionType::SendF, 0}, 1.0},
           {Action{0, ActionType::Forward, 0}, -1.0},
           {Action{0, ActionType::Forward, 0}, std::nan("")}}) {
    options.actionCosts = {{action, cost}};
    EXPECT_FALSE(simulateSchedule(s, options)) << formatAction(action) << " = " << cost;
  }
}

// Actions whose times vary: a spread of 0 is the fixed-cost play; a seed gives the same plays
// every time, another seed others; the mean bubble over plays is above the fixed-cost one (a rank
// waits for its slowest input); a negative spread or no samples is refused.
TEST(Schedule, CostSpreadPlaysAreSeededAndLengthenTheSchedule) {
  Schedule s = *generateSchedule(ScheduleKind::Interleaved1F1B, 4, 4, 2);
  SimulationOptions options;
  options.stages = {StageCosts{}};
  const SimulationResult fixed = *simulateSchedule(s, options);
  options.costSpread = 0.3;
  Expected<SimulationResult> spread = simulateWithSpread(s, options, 300);
  ASSERT_TRUE(spread) << spread.error().message();
  ASSERT_TRUE(spread->spread);
  EXPECT_EQ(spread->spread->samples, 300u);
  EXPECT_GT(spread->spread->meanBubble, fixed.bubbleFraction);
  EXPECT_GT(spread->spread->meanMakespan, fixed.makespan);
  EXPECT_LE(spread->spread->minBubble, spread->spread->meanBubble);
  EXPECT_GE(spread->spread->maxBubble, spread->spread->meanBubble);
  EXPECT_LT(spread->spread->minBubble, spread->spread->maxBubble);
  Expected<SimulationResult> again = simulateWithSpread(s, options, 300);
  EXPECT_EQ(again->spread->meanBubble, spread->spread->meanBubble);
  EXPECT_EQ(again->makespan, spread->makespan);
  options.spreadSeed = 2;
  EXPECT_NE(simulateSchedule(s, options)->makespan, spread->makespan); // the first play is seed 1
  options.costSpread = 0.0;
  EXPECT_EQ(simulateWithSpread(s, options, 5)->spread->meanBubble, fixed.bubbleFraction);
  options.costSpread = -0.1;
  EXPECT_FALSE(simulateSchedule(s, options));
  options.costSpread = 0.3;
  EXPECT_FALSE(simulateWithSpread(s, options, 0));
}

// ZB-V, F = I = W: every rank idles only the pipeline's fill (rank R - 1 cannot start before R - 1
// forwards, so no schedule does better) and holds at most 2R stage activations, 1F1B's memory
// (1F1B's stages are twice as large: two of ZB-V's). The V placement: rank r runs stages r and
// 2R - 1 - r, and both stages' actions only.
TEST(Schedule, ZeroBubbleVIdlesOnlyTheFillAtOneFOneBsMemory) {
  for (std::uint32_t ranks : {1u, 2u, 3u, 4u, 8u})
    for (std::uint32_t microbatches : {2 * ranks, 2 * ranks + 1, 5 * ranks}) {
      SCOPED_TRACE(std::to_string(ranks) + " ranks, " + std::to_string(microbatches) + " microbatches");
      Expected<Schedule> zbv = generateSchedule(ScheduleKind::ZeroBubbleV, 2 * ranks, microbatches, ranks);
      ASSERT_TRUE(zbv);
      EXPECT_EQ(zbv->placement, Placement::V);
      for (std::uint32_t r = 0; r < ranks; ++r)
        for (const Action& action : zbv->perRank[r])
          EXPECT_TRUE(action.stage == r || action.stage == 2 * ranks - 1 - r) << formatAction(action);
      EXPECT_TRUE(validateSchedule(withCommunication(*zbv)));
      SimulationResult played = *simulateSchedule(*zbv); // F 1, I 1, W 1
      EXPECT_DOUBLE_EQ(played.makespan, 6.0 * microbatches + (ranks - 1));
      SimulationOptions doubled; // 1F1B over R stages, each as large as two of ZB-V's
      doubled.stages = {StageCosts{.forward = 2.0, .backward = 4.0, .activationBytes = 2}};
      SimulationResult oneF =
          *simulateSchedule(*generateSchedule(ScheduleKind::OneFOneB, ranks, microbatches, ranks), doubled);
      for (std::uint32_t r = 0; r < ranks; ++r)
        EXPECT_EQ(played.peakActivationBytes[r], 2 * std::int64_t{ranks});
      EXPECT_EQ(oneF.peakActivationBytes[0], 2 * std::int64_t{ranks});
      EXPECT_LE(played.makespan, oneF.makespan);
    }
}

// DualPipeV against the DualPipe README: bubble (PP/2 - 1)(F&B + B - 3W) with PP = 2R stages and B
// a full backward, the F&B pairs played as one block (pairCost), and PP + 1 activations, on every
// rank count and for costs where a forward is no longer than an input backward (the README's
// setting; with F = 2, I = W = 1 the schedule idles (R - 1) x 4 where the formula says x 3).
TEST(Schedule, DualPipeVHasTheReadmesBubbleAndActivations) {
  struct Costs { double forward, input, weight, pair; };
  for (Costs c : {Costs{1, 1, 1, 3}, Costs{1, 2, 1, 4}, Costs{2, 3, 1, 5}, Costs{1, 2, 2, 5}, Costs{1, 1, 1, 2}})
    for (std::uint32_t ranks : {2u, 4u, 8u})
      for (std::uint32_t microbatches : {2 * ranks, 4 * ranks + 1}) {
        SCOPED_TRACE(std::to_string(ranks) + " ranks, " + std::to_string(microbatches) + " microbatches, F&B " +
                     std::to_string(c.pair));
        Expected<Schedule> dual = generateSchedule(ScheduleKind::DualPipeV, 2 * ranks, microbatches, ranks);
        ASSERT_TRUE(dual);
        EXPECT_TRUE(validateSchedule(withCommunication(*dual)));
        SimulationOptions options;
        const double full = c.input + c.weight;
        options.stages = {StageCosts{.forward = c.forward, .backward = full, .backwardInput = c.input,
                                     .backwardWeight = c.weight}};
        options.pairCost = c.pair;
        SimulationResult played = *simulateSchedule(*dual, options);
        double idle = 0.0;
        for (double busy : played.busy)
          idle = std::max(idle, played.makespan - busy);
        EXPECT_DOUBLE_EQ(idle, (ranks - 1) * (c.pair + full - 3 * c.weight));
        for (std::int64_t held : played.peakActivationBytes)
          EXPECT_EQ(held, 2 * std::int64_t{ranks} + 1);
      }
  EXPECT_FALSE(generateSchedule(ScheduleKind::DualPipeV, 8, 7, 4)); // fewer than 2R microbatches
  EXPECT_FALSE(generateSchedule(ScheduleKind::ZeroBubbleV, 4, 8, 4)); // not 2 stages per rank
}

// A CSV's placement is the one its actions follow: a V schedule reads back as V; a stage on a
// rank neither placement gives is read as loop-placed, which the validator refuses, naming it.
TEST(Schedule, CsvPlacementIsInferred) {
  const Schedule zbv = *generateSchedule(ScheduleKind::ZeroBubbleV, 4, 4, 2);
  Expected<Schedule> back = parseCsv(formatCsv(zbv));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->placement, Placement::V);
  EXPECT_EQ(back->perRank, zbv.perRank);
  EXPECT_EQ(parseCsv(formatCsv(*generateSchedule(ScheduleKind::OneFOneB, 4, 4, 4)))->placement, Placement::Loop);
  Expected<Schedule> misplaced = parseCsv("0F0,1F0\n2F0,3F0\n");
  ASSERT_TRUE(misplaced);
  EXPECT_EQ(misplaced->placement, Placement::Loop);
  Status refused = validateSchedule(*misplaced);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("belongs to rank"), std::string::npos) << refused.error().message();
  static_assert(stageRank(5, 3, Placement::V) == 0 && stageRank(3, 3, Placement::V) == 2 &&
                stageRank(6, 3, Placement::V) == 0 && stageRank(5, 3) == 2);
}

TEST(Schedule, ActionsAndCsvRoundTrip) {
  for (const char* text : {"1F0", "2I1", "0W3", "0B3", "2SEND_B2", "1RECV_F1", "13SEND_F127"}) {
    Expected<Action> action = parseAction(text);
    ASSERT_TRUE(action) << text;
    EXPECT_EQ(formatAction(*action), text);
  }
  for (const char* bad : {"F0", "1F", "1X0", "", "1SENDF0"})
    EXPECT_FALSE(parseAction(bad)) << bad;
  Schedule s = withCommunication(*generateSchedule(ScheduleKind::Interleaved1F1B, 8, 8, 4));
  Expected<Schedule> back = parseCsv(formatCsv(s));
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->perRank.size(), s.perRank.size());
  for (std::size_t r = 0; r < s.perRank.size(); ++r)
    EXPECT_EQ(back->perRank[r], s.perRank[r]);
}

// What the distributed runners compute: GPipe's rank order without a schedule (3 stages on 2
// ranks: rank 0 holds stages 0 and 2), a schedule's compute actions otherwise (no transfers),
// forwards only for inference.
TEST(Schedule, RankComputeActionsGiveEachRankItsOrder) {
  auto text = [](const std::vector<Action>& actions) {
    std::string joined;
    for (const Action& action : actions)
      joined += (joined.empty() ? "" : ",") + formatAction(action);
    return joined;
  };
  EXPECT_EQ(text(rankComputeActions(nullptr, 3, 2, 2, 0, true)), "0F0,2F0,0F1,2F1,2B0,0B0,2B1,0B1");
  EXPECT_EQ(text(rankComputeActions(nullptr, 3, 2, 2, 1, false)), "1F0,1F1");
  Schedule zeroBubble = withCommunication(*generateSchedule(ScheduleKind::ZeroBubble, 2, 2, 2));
  std::vector<Action> training = rankComputeActions(&zeroBubble, 2, 2, 2, 1, true);
  std::vector<Action> compute;
  for (const Action& action : zeroBubble.perRank[1])
    if (action.type != ActionType::SendF && action.type != ActionType::RecvF && action.type != ActionType::SendB &&
        action.type != ActionType::RecvB)
      compute.push_back(action);
  EXPECT_EQ(training, compute);
  EXPECT_EQ(text(rankComputeActions(&zeroBubble, 2, 2, 2, 1, false)), "1F0,1F1");
}

TEST(Schedule, TheValidatorRefusesBrokenSchedules) {
  auto message = [](const std::string& csv) {
    Expected<Schedule> s = parseCsv(csv);
    if (!s)
      return s.error().message();
    Status valid = validateSchedule(*s);
    return valid ? std::string() : valid.error().message();
  };
  // Rank 0 waits for stage 1's backward before running its forward: a deadlock.
  EXPECT_NE(message("0F0,0B0\n1B0,1F0\n").find("deadlocks"), std::string::npos);
  EXPECT_NE(message("0F0\n1F0,1B0\n").find("no backward"), std::string::npos);
  EXPECT_NE(message("0F0,0B0,1F0\n1F0,1B0\n").find("belongs to rank 1"), std::string::npos);
  EXPECT_NE(message("0F0,0B0,0F0\n1F0,1B0\n").find("twice"), std::string::npos);
  EXPECT_NE(message("0F0,0I0\n1F0,1B0\n").find("no backward"), std::string::npos);
  EXPECT_EQ(message("0F0,0I0,0W0\n1F0,1B0\n"), "");
}

TEST(Schedule, TransportsRendezvousAndOrderedChannels) {
  // Every generated schedule keeps each channel's sends and receives in the same order.
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubble})
    EXPECT_TRUE(validateSchedule(withCommunication(*generateSchedule(kind, 4, 8, 4)), {SendSemantics::Buffered, true}));
  for (ScheduleKind kind : {ScheduleKind::Interleaved1F1B, ScheduleKind::LoopedBFS})
    EXPECT_TRUE(validateSchedule(withCommunication(*generateSchedule(kind, 8, 8, 4)), {SendSemantics::Buffered, true}));
  // GPipe fits blocking sends; 1F1B as lowered does not (rank 0 sends its next forward while
  // rank 1 sends the first backward: each waits for the other's receive), which buffered sends avoid.
  TransportFit gpipe = checkTransports(withCommunication(*generateSchedule(ScheduleKind::GPipe, 4, 8, 4)));
  EXPECT_EQ(gpipe.rendezvous, "");
  EXPECT_EQ(gpipe.orderedChannels, "");
  Schedule oneF = withCommunication(*generateSchedule(ScheduleKind::OneFOneB, 2, 3, 2));
  EXPECT_TRUE(validateSchedule(oneF));
  Status blocking = validateSchedule(oneF, {SendSemantics::Rendezvous, false});
  ASSERT_FALSE(blocking);
  EXPECT_NE(blocking.error().message().find("rank 0 at 0SEND_F1, rank 1 at 1SEND_B0"), std::string::npos)
      << blocking.error().message();
  // Receives posted in the other order: fine by tag, not for an untagged transport.
  Expected<Schedule> swapped = parseCsv("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                                        "1RECV_F1,1F1,1RECV_F0,1F0,1B0,1SEND_B0,1B1,1SEND_B1\n");
  ASSERT_TRUE(swapped);
  EXPECT_TRUE(validateSchedule(*swapped));
  Status ordered = validateSchedule(*swapped, {SendSemantics::Buffered, true});
  ASSERT_FALSE(ordered);
  EXPECT_NE(ordered.error().message().find("channel rank 0 -> rank 1: message 0 is sent as 1F0 but received as 1F1"),
            std::string::npos)
      << ordered.error().message();
}

ir::NodeSpec pipeSplit(std::string name) {
  ir::NodeSpec marker;
  marker.opType = "PipeSplit";
  marker.domain = "cleave";
  marker.name = std::move(name);
  return marker;
}

// x -> r0 .. r7 (Relu), a parameter read by r1 and r6, a skip from r2 to r7, output "loss".
ir::Graph chainWithSkip(bool markers) {
  TestGraph t;
  t.input("x").param("w");
  t.op("Relu", "r0", {"x"}).op("Add", "r1", {"r0", "w"}).op("Relu", "r2", {"r1"});
  if (markers)
    t.node(pipeSplit("split_a"));
  t.op("Relu", "r3", {"r2"}).op("Relu", "r4", {"r3"});
  if (markers)
    t.node(pipeSplit("split_b")).node(pipeSplit("split_c")); // consecutive: collapse into split_b
  t.op("Relu", "r5", {"r4"}).op("Add", "r6", {"r5", "w"}).op("Add", "loss", {"r6", "r2"});
  return t.output({"loss"}).build();
}

TEST(Stages, MarkersCutAndParametersAndSkipsAreRouted) {
  ir::Graph g = chainWithSkip(true);
  Expected<PipelinePlan> plan = planPipeline(g, {});
  ASSERT_TRUE(plan) << plan.error().message();
  ASSERT_EQ(plan->plan.submodules.size(), 3u);
  EXPECT_EQ(plan->plan.submodules[0].nodes.size(), 3u);
  EXPECT_EQ(plan->plan.submodules[1].nodes.size(), 2u);
  EXPECT_EQ(plan->plan.submodules[2].nodes.size(), 3u);
  ASSERT_EQ(plan->parameters.size(), 1u);
  EXPECT_EQ(plan->parameters[0].stages, (std::vector<std::uint32_t>{0, 2}));
  // r2 goes straight from stage 0 to stage 2.
  ir::ValueId r2 = g.findValue("r2");
  EXPECT_NE(std::find(plan->boundaries[2].inputs.begin(), plan->boundaries[2].inputs.end(), r2),
            plan->boundaries[2].inputs.end());
  // Backward: stage 2 first; it sends r2's gradient to stage 0, which also receives it from stage 1
  // (through r3): accumulated.
  ASSERT_TRUE(plan->loss);
  ASSERT_EQ(plan->backward.size(), 3u);
  EXPECT_EQ(plan->backward[0].stage, 2u);
  const BackwardStep& first = plan->backward[2];
  EXPECT_EQ(first.stage, 0u);
  ASSERT_EQ(first.receives.size(), 1u);
  EXPECT_EQ(first.receives[0].fromStages, (std::vector<std::uint32_t>{1, 2}));
  // Transmit: stage 2 takes w from stage 0.
  PipelineOptions transmit;
  transmit.multiUse = MultiUse::Transmit;
  Expected<PipelinePlan> sent = planPipeline(g, transmit);
  ASSERT_TRUE(sent);
  ASSERT_EQ(sent->transmitted.size(), 1u);
  ir::ValueId w = g.findValue("w");
  EXPECT_NE(std::find(sent->boundaries[2].inputs.begin(), sent->boundaries[2].inputs.end(), w),
            sent->boundaries[2].inputs.end());
  EXPECT_NE(std::find(sent->boundaries[0].outputs.begin(), sent->boundaries[0].outputs.end(), w),
            sent->boundaries[0].outputs.end());
  EXPECT_EQ(sent->stats[2].paramBytes, 0);
}

TEST(Stages, SplitPointsPoliciesAndErrors) {
  ir::Graph g = chainWithSkip(false);
  PipelineOptions byNames;
  byNames.spec = SplitSpec{{}, {"r3"}, {"r5"}};
  Expected<PipelinePlan> plan = planPipeline(g, byNames);
  ASSERT_TRUE(plan) << plan.error().message();
  EXPECT_EQ(plan->plan.submodules.size(), 3u);
  byNames.spec = SplitSpec{{}, {"r0"}, {}};
  Expected<PipelinePlan> empty = planPipeline(g, byNames);
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().message().find("split_before 'r0' would leave stage 0 empty"), std::string::npos)
      << empty.error().message();
  byNames.spec = SplitSpec{{{"decoder", true}}, {}, {}};
  EXPECT_NE(planPipeline(g, byNames).error().message().find("'decoder'"), std::string::npos);
  PipelineOptions equal;
  equal.stages = 4;
  Expected<PipelinePlan> four = planPipeline(g, equal);
  ASSERT_TRUE(four);
  EXPECT_EQ(four->plan.submodules.size(), 4u);
  EXPECT_DOUBLE_EQ(four->imbalance, 1.0); // 8 nodes, 2 each
  equal.stages = 9;
  EXPECT_FALSE(planPipeline(g, equal));
  PipelineOptions wrongLoss;
  wrongLoss.stages = 2;
  wrongLoss.loss = "objective";
  Expected<PipelinePlan> noLoss = planPipeline(g, wrongLoss);
  ASSERT_FALSE(noLoss);
  EXPECT_NE(noLoss.error().message().find("'objective' among the outputs (loss)"), std::string::npos);
  // A marker at the very start leaves the first stage empty.
  TestGraph t;
  t.input("x").node(pipeSplit("too_early")).op("Relu", "a", {"x"});
  ir::Graph early = t.output({"a"}).build();
  Expected<PipelinePlan> bad = planPipeline(early, {});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("'too_early' would leave stage 0 empty"), std::string::npos)
      << bad.error().message();
}

} // namespace
} // namespace cleave::pipeline

namespace cleave::pipeline {
namespace {

// Two stages on two ranks, 1F1B over 2 microbatches, 100 bytes a message: each rank posts both
// of its receives before its first action's end (two actions ahead) and lets the first go after
// the backward of microbatch 0, so both hold 200 bytes at most.
TEST(ReceiveBufferModel, ReceivesPostedAheadAreHeldUntilTheirStagesBackward) {
  Expected<Schedule> schedule = generateSchedule(ScheduleKind::OneFOneB, 2, 2, 2);
  ASSERT_TRUE(schedule);
  Expected<std::vector<StageEdge>> edges = parseStageEdges("0>1:100", 2);
  ASSERT_TRUE(edges);
  Expected<std::vector<std::int64_t>> peaks = receiveBufferPeaks(*schedule, *edges, 2);
  ASSERT_TRUE(peaks) << peaks.error().message();
  EXPECT_EQ(*peaks, (std::vector<std::int64_t>{200, 200}));
  // Looking no action ahead, each rank holds one message at a time.
  peaks = receiveBufferPeaks(*schedule, *edges, 0);
  ASSERT_TRUE(peaks);
  EXPECT_EQ(*peaks, (std::vector<std::int64_t>{100, 100}));
  // GPipe over 4 microbatches: the last stage receives every forward before its first backward.
  Expected<Schedule> gpipe = generateSchedule(ScheduleKind::GPipe, 2, 4, 2);
  ASSERT_TRUE(gpipe);
  peaks = receiveBufferPeaks(*gpipe, *edges, 2);
  ASSERT_TRUE(peaks);
  EXPECT_EQ((*peaks)[1], 400);
  // Stages on one rank send nothing; edges are checked.
  Expected<Schedule> one = generateSchedule(ScheduleKind::LoopedBFS, 2, 2, 1);
  ASSERT_TRUE(one);
  peaks = receiveBufferPeaks(*one, *edges, 2);
  ASSERT_TRUE(peaks);
  EXPECT_EQ(*peaks, (std::vector<std::int64_t>{0}));
  EXPECT_FALSE(parseStageEdges("1>0:5", 2));
  EXPECT_FALSE(parseStageEdges("0>2:5", 2));
  EXPECT_FALSE(parseStageEdges("0>1", 2));
}

} // namespace
} // namespace cleave::pipeline
