// base/resources.h - what this process has used of the machine, for reports and benchmarks.
// Complexity: one system call.
#pragma once

#include <sys/resource.h>

#include <cstdint>

namespace cleave {

// The peak resident set of this process so far, in bytes (getrusage's ru_maxrss): parameters,
// activations, the libraries' own pages and the allocator's retained memory, all included.
inline std::int64_t peakResidentBytes() {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0)
    return -1;
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;
}

} // namespace cleave
