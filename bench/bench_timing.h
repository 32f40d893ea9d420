// bench/bench_timing.h - the timing helpers every benchmark uses.
// Guarantee: only `work` runs inside the timed region. Complexity: O(repeat log repeat) besides it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
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

// The median of `values` (the upper one of an even count); `values` must not be empty.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// `--rounds R` and `--repeat N` (each at least 1) over `rounds` and `repeat`, which hold the
// defaults; false on any other argument (the caller prints its usage and exits 2).
inline bool parseRoundsAndRepeat(int argc, char** argv, int& rounds, int& repeat) {
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc || (flag != "--rounds" && flag != "--repeat"))
      return false;
    (flag == "--rounds" ? rounds : repeat) = std::max(1, std::atoi(argv[i + 1]));
  }
  return true;
}

} // namespace cleave::bench
