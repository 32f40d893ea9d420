#include "base/resources.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace cleave {
namespace {

// A thread started in between is the one new id; its clock counts its own spinning, not the
// caller's, and reads -1 once it has exited.
TEST(Resources, ThreadCpuSecondsFollowsOneThreadByItsKernelId) {
  const std::vector<pid_t> before = threadIds();
  std::atomic<pid_t> id{0};
  std::atomic<bool> spin{false}, stop{false};
  std::thread worker([&] {
    id = static_cast<pid_t>(::syscall(SYS_gettid));
    while (!stop) {
      if (!spin)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  while (id == 0)
    std::this_thread::yield();
  ASSERT_EQ(threadsStartedSince(before), std::vector<pid_t>{id.load()});

  const double idle = threadCpuSeconds(id);
  ASSERT_GE(idle, 0.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100)); // the worker sleeps: little CPU
  const double slept = threadCpuSeconds(id) - idle;
  EXPECT_LT(slept, 0.05);
  spin = true;
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(200)); // the worker spins, this thread sleeps
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double spun = threadCpuSeconds(id) - idle - slept;
  EXPECT_GT(spun, 0.02); // at least a tenth of the wall time, even on a busy machine
  EXPECT_LE(spun, wall + 0.01);
  stop = true;
  worker.join();
  // join() returns when the kernel clears the thread's id, which it does just before it removes
  // the thread's /proc entry: under load the entry can outlive join() for a moment.
  double gone = threadCpuSeconds(id);
  for (int wait = 0; wait < 1000 && gone != -1.0; ++wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    gone = threadCpuSeconds(id);
  }
  EXPECT_EQ(gone, -1.0);
}

} // namespace
} // namespace cleave
