// bench/bench_pipeline.cpp - time the pipeline planner and the schedule simulator.
//
//   bench_pipeline MODEL [--stages K] [--repeat N]
//
// planPipeline with the optimal policy (latency balance) into K stages (default 64), and
// generate + validate + simulate schedules of 64 ranks x 512 microbatches (1f1b, zero_bubble,
// interleaved with 2 stages per rank, all with communication actions). Best and median seconds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench/bench_timing.h"
#include "io/model_loader.h"
#include "pipeline/schedule_sim.h"
#include "pipeline/stages.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_pipeline MODEL [--stages K] [--repeat N]\n");
    return 2;
  }
  std::uint32_t stages = 64;
  int repeat = 3;
  for (int a = 2; a + 1 < argc; a += 2) {
    if (std::strcmp(argv[a], "--stages") == 0)
      stages = static_cast<std::uint32_t>(std::atoi(argv[a + 1]));
    else if (std::strcmp(argv[a], "--repeat") == 0)
      repeat = std::atoi(argv[a + 1]);
  }
  auto graph = cleave::io::loadModel(argv[1]);
  if (!graph) {
    std::fprintf(stderr, "bench_pipeline: %s\n", graph.error().message().c_str());
    return 1;
  }
  cleave::pipeline::PipelineOptions options;
  options.stages = stages;
  options.policy = cleave::pipeline::Policy::Optimal;
  double imbalance = 0;
  auto [planBest, planMedian] = cleave::bench::timeRepeated(repeat, [&] {
    auto plan = cleave::pipeline::planPipeline(*graph, options);
    if (!plan) {
      std::fprintf(stderr, "bench_pipeline: %s\n", plan.error().message().c_str());
      std::exit(1);
    }
    imbalance = plan->imbalance;
  });
  std::printf("plan nodes=%u stages=%u optimal_best_s=%.4f optimal_median_s=%.4f imbalance=%.4f\n",
              graph->numNodes(), stages, planBest, planMedian, imbalance);
  using cleave::pipeline::ScheduleKind;
  for (auto [kind, perRank] : {std::pair{ScheduleKind::OneFOneB, 1u}, std::pair{ScheduleKind::ZeroBubble, 1u},
                               std::pair{ScheduleKind::Interleaved1F1B, 2u}}) {
    double makespan = 0, bubble = 0;
    std::size_t actions = 0;
    auto [best, median] = cleave::bench::timeRepeated(repeat, [&] {
      auto schedule = cleave::pipeline::generateSchedule(kind, 64 * perRank, 512, 64);
      auto withComm = cleave::pipeline::withCommunication(*schedule);
      auto result = cleave::pipeline::simulateSchedule(withComm);
      if (!result) {
        std::fprintf(stderr, "bench_pipeline: %s\n", result.error().message().c_str());
        std::exit(1);
      }
      actions = 0;
      for (const auto& rank : withComm.perRank)
        actions += rank.size();
      makespan = result->makespan;
      bubble = result->bubbleFraction;
    });
    std::printf("schedule kind=%s ranks=64 stages=%u microbatches=512 actions=%zu best_s=%.4f median_s=%.4f "
                "makespan=%.0f bubble=%.4f\n",
                std::string(cleave::pipeline::kScheduleKinds.name(kind)).c_str(), 64 * perRank, actions, best, median,
                makespan, bubble);
  }
  return 0;
}
