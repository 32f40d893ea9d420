#include "base/resources.h"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <ctime>

namespace cleave {

std::vector<pid_t> threadIds() {
  std::vector<pid_t> ids;
  DIR* dir = opendir("/proc/self/task");
  if (!dir)
    return ids;
  while (const dirent* entry = readdir(dir))
    if (entry->d_name[0] >= '0' && entry->d_name[0] <= '9')
      ids.push_back(static_cast<pid_t>(std::atol(entry->d_name)));
  closedir(dir);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<pid_t> threadsStartedSince(const std::vector<pid_t>& before) {
  const std::vector<pid_t> now = threadIds();
  std::vector<pid_t> started;
  std::set_difference(now.begin(), now.end(), before.begin(), before.end(), std::back_inserter(started));
  return started;
}

double threadCpuSeconds(pid_t tid) {
  // Linux's clock id of one thread's scheduler clock, as pthread_getcpuclockid makes it from a
  // pthread_t (the kernel's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)): a thread this process did
  // not start itself (a library's) has only its kernel id to go by.
  constexpr clockid_t kPerThread = 4, kSchedulerClock = 2;
  const clockid_t clock = static_cast<clockid_t>((~static_cast<unsigned>(tid)) << 3) | kPerThread | kSchedulerClock;
  timespec spent{};
  if (clock_gettime(clock, &spent) != 0)
    return -1.0;
  return static_cast<double>(spent.tv_sec) + static_cast<double>(spent.tv_nsec) * 1e-9;
}

} // namespace cleave
