// bench/bench_split.cpp - time the accelerator/CPU split of a model.
//
//   bench_split MODEL PROFILE [--repeat N]
//
// Loads the model once (timed apart), then runs support decisions + the full split (acc nodes,
// fusion groups, sweep, small-subgraph merges, tags, plan; no submodels written) N times and
// prints the best and median seconds, with the submodule counts.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/bench_timing.h"
#include "io/model_loader.h"
#include "split/splitter.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_split MODEL PROFILE [--repeat N]\n");
    return 2;
  }
  int repeat = argc > 4 && std::strcmp(argv[3], "--repeat") == 0 ? std::atoi(argv[4]) : 5;
  auto start = std::chrono::steady_clock::now();
  cleave::Expected<cleave::ir::Graph> graph = cleave::io::loadModel(argv[1]);
  double loadSeconds = cleave::bench::secondsSince(start);
  cleave::Expected<cleave::support::Profile> profile = cleave::support::Profile::load(argv[2]);
  if (!graph || !profile) {
    std::fprintf(stderr, "bench_split: %s\n", (!graph ? graph.error() : profile.error()).message().c_str());
    return 1;
  }
  std::vector<double> times;
  std::size_t acc = 0, total = 0;
  for (int i = 0; i < repeat; ++i) {
    start = std::chrono::steady_clock::now();
    auto decisions = cleave::support::decideAll(*graph, *profile);
    auto result = cleave::split::splitGraph(*graph, decisions, {});
    times.push_back(cleave::bench::secondsSince(start));
    if (!result) {
      std::fprintf(stderr, "bench_split: %s\n", result.error().message().c_str());
      return 1;
    }
    total = result->plan.submodules.size();
    acc = std::count_if(result->plan.submodules.begin(), result->plan.submodules.end(),
                        [](const auto& s) { return s.role == cleave::plan::SubmoduleRole::Accelerator; });
  }
  std::sort(times.begin(), times.end());
  std::printf("nodes=%u load_s=%.4f split_best_s=%.6f split_median_s=%.6f submodules=%zu acc=%zu\n",
              graph->numNodes(), loadSeconds, times.front(), times[times.size() / 2], total, acc);
  return 0;
}
