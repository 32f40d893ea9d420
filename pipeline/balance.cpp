#include "pipeline/balance.h"

#include <algorithm>
#include <numeric>

namespace cleave::pipeline {

std::vector<std::size_t> cutGreedy(const std::vector<double>& weights, std::size_t stages) {
  std::size_t count = weights.size();
  stages = std::max<std::size_t>(1, std::min(stages, count));
  double total = std::accumulate(weights.begin(), weights.end(), 0.0), running = 0.0;
  std::vector<std::size_t> starts{0};
  for (std::size_t i = 0; i < count; ++i) {
    running += weights[i];
    std::size_t k = starts.size(); // stages opened so far
    // Close the current stage when it reached its share, keeping a node for every later stage.
    bool reached = running >= total * static_cast<double>(k) / static_cast<double>(stages);
    bool mustClose = count - (i + 1) == stages - k;
    if (k < stages && i + 1 < count && (reached || mustClose))
      starts.push_back(i + 1);
  }
  return starts;
}

double bottleneckOf(const std::vector<double>& weights, const std::vector<std::size_t>& starts) {
  double worst = 0.0;
  for (std::size_t s = 0; s < starts.size(); ++s) {
    std::size_t end = s + 1 < starts.size() ? starts[s + 1] : weights.size();
    worst = std::max(worst, std::accumulate(weights.begin() + static_cast<std::ptrdiff_t>(starts[s]),
                                            weights.begin() + static_cast<std::ptrdiff_t>(end), 0.0));
  }
  return worst;
}

namespace {
// Greedy: each stage extended while its weight stays <= limit and its memory within the limit.
// Returns the starts, or an empty vector when more than `stages` stages would be needed.
std::vector<std::size_t> packGreedily(const std::vector<double>& weights, std::size_t stages, double limit,
                                      const std::vector<std::int64_t>& memory, std::int64_t memoryLimit) {
  std::vector<std::size_t> starts{0};
  double weight = 0.0;
  std::int64_t bytes = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    std::int64_t nodeBytes = memory.empty() ? 0 : memory[i];
    bool fits = weight + weights[i] <= limit && (memoryLimit <= 0 || bytes + nodeBytes <= memoryLimit);
    if (!fits && i > starts.back()) {
      starts.push_back(i);
      weight = 0.0;
      bytes = 0;
      if (starts.size() > stages)
        return {};
    }
    weight += weights[i];
    bytes += nodeBytes;
  }
  return starts;
}
} // namespace

Expected<std::vector<std::size_t>> cutOptimal(const std::vector<double>& weights, std::size_t stages,
                                              const std::vector<std::int64_t>& memory, std::int64_t memoryLimit) {
  std::size_t count = weights.size();
  if (count == 0)
    return std::vector<std::size_t>{0};
  stages = std::max<std::size_t>(1, std::min(stages, count));
  if (memoryLimit > 0)
    for (std::size_t i = 0; i < count; ++i)
      if (memory[i] > memoryLimit)
        return Error(ErrorCode::DoesNotFit) << "node " << i << " needs " << memory[i] << " bytes; a stage holds "
                                            << memoryLimit;
  double low = *std::max_element(weights.begin(), weights.end());
  double high = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<std::size_t> best = packGreedily(weights, stages, high, memory, memoryLimit);
  if (best.empty())
    return Error(ErrorCode::DoesNotFit) << stages << " stages of " << memoryLimit << " bytes cannot hold the model";
  high = bottleneckOf(weights, best);
  // Bisection on the bottleneck; every feasible probe's own bottleneck tightens the bound.
  for (int iteration = 0; iteration < 100 && low < high; ++iteration) {
    double mid = low + (high - low) / 2;
    if (mid <= low || mid >= high)
      break;
    std::vector<std::size_t> starts = packGreedily(weights, stages, mid, memory, memoryLimit);
    if (starts.empty()) {
      low = mid;
    } else {
      best = std::move(starts);
      high = bottleneckOf(weights, best);
    }
  }
  // Use all stages when nodes allow: split the heaviest stages further without raising the
  // bottleneck (a stage of one node stays whole).
  while (best.size() < stages) {
    std::size_t pick = best.size(), most = 1;
    for (std::size_t s = 0; s < best.size(); ++s) {
      std::size_t length = (s + 1 < best.size() ? best[s + 1] : count) - best[s];
      if (length > most) {
        most = length;
        pick = s;
      }
    }
    if (pick == best.size())
      break;
    std::size_t end = pick + 1 < best.size() ? best[pick + 1] : count;
    best.insert(best.begin() + static_cast<std::ptrdiff_t>(pick) + 1, end - 1);
  }
  return best;
}

} // namespace cleave::pipeline
