// base/resources.h - what this process has used of the machine, for reports and benchmarks.
// Complexity: peakResidentBytes and threadCpuSeconds, one system call each; threadIds, one
// directory read (O(threads)).
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace cleave {

// The peak resident set of this process so far, in bytes (getrusage's ru_maxrss): parameters,
// activations, the libraries' own pages and the allocator's retained memory, all included.
inline std::int64_t peakResidentBytes() {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0)
    return -1;
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;
}

// The kernel ids of this process's threads now, ascending (/proc/self/task; empty where there is
// no /proc).
std::vector<pid_t> threadIds();

// The threads running now that were not in `before` (threadIds() taken earlier): what a library
// started in a call, taken around it.
std::vector<pid_t> threadsStartedSince(const std::vector<pid_t>& before);

// The CPU seconds thread `tid` of this process has run so far (the scheduler's clock of that one
// thread, user and system time alike); -1 once the thread has exited.
double threadCpuSeconds(pid_t tid);

} // namespace cleave
