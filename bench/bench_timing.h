// bench/bench_timing.h - the timing helpers every benchmark uses.
// Guarantee: only `work` runs inside the timed region. Complexity: O(repeat log repeat) besides it.
#pragma once

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

namespace cleave::bench {

inline double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Runs `work` `repeat` times; (best, median) seconds.
template <typename Work> std::pair<double, double> timeRepeated(int repeat, Work&& work) {
  std::vector<double> times;
  for (int i = 0; i < repeat; ++i) {
    auto start = std::chrono::steady_clock::now();
    work();
    times.push_back(secondsSince(start));
  }
  std::sort(times.begin(), times.end());
  return {times.front(), times[times.size() / 2]};
}

} // namespace cleave::bench
