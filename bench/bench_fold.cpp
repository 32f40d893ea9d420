// bench/bench_fold.cpp - what folding a model's shape arithmetic (simplify/shape_folding.h) costs
// next to reading the model, the budget it must keep (issue 44: at most 10% of reading).
//
//   bench_fold MODEL [--rounds R] [--repeat N]
//
// Each round reads the model (readOnnx), then plans the folding (planShapeFolding) and applies
// it (applyFoldPlan: the graph rebuilt without the folded nodes, even when nothing folded, so its
// cost shows), interleaved on the same file; prints each phase's median over the rounds and the
// ratios fold / read with their spread (min..max over the rounds).
#include <algorithm>
#include <cstdio>
#include <optional>
#include <vector>

#include "bench/bench_timing.h"
#include "io/onnx.h"
#include "simplify/shape_folding.h"

int main(int argc, char** argv) {
  int rounds = 3, repeat = 1;
  if (argc < 2 || !cleave::bench::parseRoundsAndRepeat(argc - 1, argv + 1, rounds, repeat)) {
    std::fprintf(stderr, "usage: bench_fold MODEL [--rounds R] [--repeat N]\n");
    return 2;
  }
  std::vector<double> reads, plans, applies, planRatios, allRatios;
  std::size_t nodes = 0, folded = 0;
  for (int round = 0; round < rounds; ++round) {
    std::optional<cleave::Expected<cleave::ir::Graph>> readResult;
    double read = cleave::bench::timeRepeated(repeat, [&] { readResult.emplace(cleave::io::readOnnx(argv[1])); }).second;
    cleave::Expected<cleave::ir::Graph>& graph = *readResult;
    if (!graph) {
      std::fprintf(stderr, "bench_fold: %s\n", graph.error().message().c_str());
      return 1;
    }
    cleave::simplify::FoldPlan plan;
    double planned = cleave::bench::timeRepeated(repeat, [&] { plan = cleave::simplify::planShapeFolding(*graph); }).second;
    std::optional<cleave::Expected<cleave::ir::Graph>> appliedResult;
    double apply =
        cleave::bench::timeRepeated(repeat, [&] { appliedResult.emplace(cleave::simplify::applyFoldPlan(*graph, plan)); }).second;
    cleave::Expected<cleave::ir::Graph>& applied = *appliedResult;
    if (!applied) {
      std::fprintf(stderr, "bench_fold: %s\n", applied.error().message().c_str());
      return 1;
    }
    nodes = graph->numNodes();
    folded = plan.folded;
    reads.push_back(read);
    plans.push_back(planned);
    applies.push_back(apply);
    planRatios.push_back(planned / read);
    allRatios.push_back((planned + apply) / read);
  }
  auto spread = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return std::make_pair(v.front(), v.back());
  };
  std::printf("nodes: %zu, folded: %zu, rounds: %d\n", nodes, folded, rounds);
  std::printf("read: %.3f s (median)\n", cleave::bench::median(reads));
  std::printf("fold plan: %.3f s, apply: %.3f s (medians)\n", cleave::bench::median(plans), cleave::bench::median(applies));
  auto [planLow, planHigh] = spread(planRatios);
  auto [allLow, allHigh] = spread(allRatios);
  std::printf("plan / read: %.3f (%.3f..%.3f)\n", cleave::bench::median(planRatios), planLow, planHigh);
  std::printf("(plan + apply) / read: %.3f (%.3f..%.3f)\n", cleave::bench::median(allRatios), allLow, allHigh);
  return 0;
}
