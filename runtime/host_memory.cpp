#include "runtime/host_memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace cleave::runtime {
namespace {

// Each block starts with this header, padded to the alignment, and the tensor's bytes follow: the
// deleter finds the block's kind and size from the data pointer alone (ATen's raw_deallocate
// passes nothing else).
constexpr std::size_t kAlignment = 64;
struct BlockHeader {
  std::size_t requestedBytes; // the tensor's bytes
  std::size_t mappedBytes;    // the whole mapping for a large block; 0 for a block from malloc
};
static_assert(sizeof(BlockHeader) <= kAlignment);

// glibc's default mmap threshold: blocks from here up are mapped by this allocator.
constexpr std::size_t kLargeBlock = 128 << 10;
constexpr std::size_t kPage = 4096;
// A kept block serves a request up to this share larger than the request (1/8): runs repeat sizes
// exactly, and a much larger block would waste what it holds while in use.
constexpr std::size_t kReuseSlackDivisor = 8;

std::size_t roundUpToPage(std::size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

BlockHeader* headerOf(void* data) { return reinterpret_cast<BlockHeader*>(static_cast<char*>(data) - kAlignment); }

// The state every allocation shares; leaked on purpose, since tensors may be freed while static
// objects are destroyed at exit.
class HostMemory {
public:
  void* allocate(std::size_t bytes) {
    if (bytes == 0)
      return nullptr;
    TORCH_CHECK(bytes <= SIZE_MAX - kPage - kAlignment, "cleave's CPU allocator: ", bytes, " bytes is too large");
    const std::size_t withHeader = bytes + kAlignment;
    void* block = withHeader >= kLargeBlock ? takeLargeBlock(roundUpToPage(withHeader)) : takeSmallBlock(withHeader);
    TORCH_CHECK(block != nullptr, "cleave's CPU allocator: out of memory allocating ", bytes, " bytes");
    auto* header = static_cast<BlockHeader*>(block);
    header->requestedBytes = bytes;
    header->mappedBytes = withHeader >= kLargeBlock ? roundUpToPage(withHeader) : 0;
    countInUse(static_cast<std::int64_t>(bytes));
    return static_cast<char*>(block) + kAlignment;
  }

  void release(void* data) {
    if (data == nullptr)
      return;
    BlockHeader* header = headerOf(data);
    countInUse(-static_cast<std::int64_t>(header->requestedBytes));
    if (header->mappedBytes == 0) {
      std::free(header);
      return;
    }
    std::lock_guard lock(mutex_);
    largeInUse_ -= header->mappedBytes;
    // Before the blocks of its size: the most recently freed is reused first, while still in cache.
    kept_.emplace_hint(kept_.lower_bound(header->mappedBytes), header->mappedBytes, header);
    keptBytes_ += header->mappedBytes;
  }

  HostMemoryStats stats() {
    HostMemoryStats stats;
    stats.bytesInUse = bytesInUse_.load(std::memory_order_relaxed);
    stats.peakBytesInUse = peakBytesInUse_.load(std::memory_order_relaxed);
    std::lock_guard lock(mutex_);
    stats.largeBytesMapped = static_cast<std::int64_t>(largeInUse_ + keptBytes_);
    stats.largeBytesKept = static_cast<std::int64_t>(keptBytes_);
    stats.largeReuses = reuses_;
    stats.largeMaps = maps_;
    stats.largeUnmaps = unmaps_;
    return stats;
  }

  // Held across fork() (base/isolated_call.h, the launcher): the child gets the kept blocks in a
  // consistent state, never a mutex that a thread which does not exist there was holding.
  void lockForFork() { mutex_.lock(); }
  void unlockAfterFork() { mutex_.unlock(); }

  void resetPeak() { peakBytesInUse_.store(bytesInUse_.load(std::memory_order_relaxed), std::memory_order_relaxed); }

private:
  static void* takeSmallBlock(std::size_t bytes) {
    void* block = nullptr;
    return posix_memalign(&block, kAlignment, bytes) == 0 ? block : nullptr;
  }

  void* takeLargeBlock(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    if (void* block = reuseKept(bytes))
      return block;
    unmapKeptToFit(bytes);
    void* block = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED)
      return nullptr;
    ++maps_;
    markLargeInUse(bytes);
    return block;
  }

  // The smallest kept block that holds `bytes` without wasting more than the slack.
  void* reuseKept(std::size_t bytes) {
    auto fit = kept_.lower_bound(bytes);
    if (fit == kept_.end() || fit->first > bytes + bytes / kReuseSlackDivisor)
      return nullptr;
    void* block = fit->second;
    keptBytes_ -= fit->first;
    markLargeInUse(fit->first);
    kept_.erase(fit);
    ++reuses_;
    return block;
  }

  // Mapped bytes stay within twice the largest in use: unmap kept blocks, largest first.
  void unmapKeptToFit(std::size_t bytes) {
    const std::size_t bound = 2 * std::max(peakLargeInUse_, largeInUse_ + bytes);
    while (!kept_.empty() && largeInUse_ + keptBytes_ + bytes > bound) {
      auto largest = std::prev(kept_.end());
      munmap(largest->second, largest->first);
      keptBytes_ -= largest->first;
      kept_.erase(largest);
      ++unmaps_;
    }
  }

  void markLargeInUse(std::size_t bytes) {
    largeInUse_ += bytes;
    peakLargeInUse_ = std::max(peakLargeInUse_, largeInUse_);
  }

  void countInUse(std::int64_t delta) {
    const std::int64_t now = bytesInUse_.fetch_add(delta, std::memory_order_relaxed) + delta;
    std::int64_t peak = peakBytesInUse_.load(std::memory_order_relaxed);
    while (now > peak && !peakBytesInUse_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }

  std::atomic<std::int64_t> bytesInUse_{0};
  std::atomic<std::int64_t> peakBytesInUse_{0};
  std::mutex mutex_; // guards everything below
  std::multimap<std::size_t, void*> kept_; // freed large blocks by mapped size
  std::size_t keptBytes_ = 0;
  std::size_t largeInUse_ = 0;
  std::size_t peakLargeInUse_ = 0;
  std::int64_t reuses_ = 0, maps_ = 0, unmaps_ = 0;
};

HostMemory& hostMemory() {
  static auto* memory = new HostMemory;
  return *memory;
}

void releaseBlock(void* data) { hostMemory().release(data); }

class KeepingCpuAllocator final : public c10::Allocator {
public:
  c10::DataPtr allocate(std::size_t bytes) const override {
    void* data = hostMemory().allocate(bytes);
    return {data, data, &releaseBlock, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &releaseBlock; }
};

// Above the default allocator's registration (priority 0).
constexpr std::uint8_t kAllocatorPriority = 1;

// glibc's largest mmap threshold: blocks up to it that do not come through ATen (oneDNN's
// scratchpads) come from the heap, which is never trimmed.
constexpr int kLargestHeapBlock = 32 << 20;

void keepCLibraryHeap() {
#if defined(__GLIBC__)
  // Both settings together: setting either one alone turns glibc's dynamic threshold off, and the
  // trim threshold alone then leaves every block over 128 KiB mapped and unmapped per step.
  mallopt(M_MMAP_THRESHOLD, kLargestHeapBlock);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
}

} // namespace

bool keepFreedHostMemory() {
  static KeepingCpuAllocator* const allocator = [] {
    keepCLibraryHeap();
    pthread_atfork([] { hostMemory().lockForFork(); }, [] { hostMemory().unlockAfterFork(); },
                   [] { hostMemory().unlockAfterFork(); });
    auto* installed = new KeepingCpuAllocator;
    c10::SetCPUAllocator(installed, kAllocatorPriority);
    return installed;
  }();
  return c10::GetCPUAllocator() == allocator;
}

HostMemoryStats hostMemoryStats() { return hostMemory().stats(); }

void resetHostMemoryPeak() { hostMemory().resetPeak(); }

} // namespace cleave::runtime
