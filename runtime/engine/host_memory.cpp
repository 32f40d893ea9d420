#include "runtime/engine/host_memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "runtime/engine/torch_compat.h"

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
  std::size_t blockBytes;     // a large block's whole extent in its segment; 0 for a block from malloc
};
static_assert(sizeof(BlockHeader) <= kAlignment);

// glibc's default mmap threshold: blocks from here up are carved from this allocator's segments.
constexpr std::size_t kLargeBlock = 128 << 10;
constexpr std::size_t kPage = 4096;
// Mapped at a time (or the request, when larger): a model's activations usually fit one.
constexpr std::size_t kSegmentBytes = 32 << 20;

std::size_t roundUpToPage(std::size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

// Small blocks (header included, under kLargeBlock) are kept by size class for reuse: 64-byte
// steps up to 1 KiB, then eight classes per doubling (at most 1/8 more than asked).
constexpr std::size_t kFineClassLimit = 1024;
constexpr std::size_t kClassesPerDoubling = 8;
constexpr std::size_t kFineClasses = kFineClassLimit / kAlignment;
constexpr std::size_t kSmallClasses = kFineClasses + kClassesPerDoubling * 7; // doublings from 1 KiB to 128 KiB

struct SizeClass {
  std::size_t index;
  std::size_t bytes;
};

// The class of a small block of `bytes` (0 < bytes < kLargeBlock). O(1).
SizeClass sizeClassOf(std::size_t bytes) {
  if (bytes <= kFineClassLimit) {
    const std::size_t steps = (bytes + kAlignment - 1) / kAlignment;
    return {steps - 1, steps * kAlignment};
  }
  // 2^e < bytes <= 2^(e + 1), in steps of 2^e / kClassesPerDoubling: kClassesPerDoubling < units
  // <= 2 * kClassesPerDoubling.
  const auto e = static_cast<std::size_t>(63 - __builtin_clzll(static_cast<unsigned long long>(bytes - 1)));
  const std::size_t step = (std::size_t{1} << e) / kClassesPerDoubling;
  const std::size_t units = (bytes + step - 1) / step;
  const std::size_t first = kFineClasses + (e - 10) * kClassesPerDoubling; // 2^10 = kFineClassLimit
  return {first + units - kClassesPerDoubling - 1, units * step};
}

BlockHeader* headerOf(void* data) { return reinterpret_cast<BlockHeader*>(static_cast<char*>(data) - kAlignment); }

// Large blocks carved from mapped segments, as a heap carves them but apart from glibc's: the best
// fitting free range is taken (split when the rest is large enough to serve another block), and a
// freed block merges with the free ranges beside it in its segment. Segments stay mapped, so what
// a run frees is resident for the next; only segments that are wholly free are unmapped, when a
// request fits no free range. Not thread-safe (HostMemory's mutex guards it). O(log R) per
// operation in the R free ranges, O(S) to look for free segments on a miss.
class Segments {
public:
  // A block of at least `bytes` (a multiple of kPage) and its extent; {nullptr, 0} when no memory.
  std::pair<char*, std::size_t> take(std::size_t bytes) {
    auto fit = freeBySize_.lower_bound({bytes, nullptr});
    if (fit == freeBySize_.end()) {
      unmapFreeSegments(); // they cannot serve this request: give them back before mapping more
      if (!mapSegment(std::max(kSegmentBytes, bytes)))
        return {nullptr, 0};
      fit = freeBySize_.lower_bound({bytes, nullptr});
    } else {
      ++reuses_;
    }
    auto [extent, start] = *fit;
    removeFree(start);
    if (extent - bytes >= kLargeBlock) { // the rest can serve another block
      addFree(start + bytes, extent - bytes);
      extent = bytes;
    }
    return {start, extent};
  }

  void give(char* block, std::size_t extent) {
    const auto segment = std::prev(segments_.upper_bound(block));
    char* const segmentEnd = segment->first + segment->second;
    if (auto next = freeByAddress_.find(block + extent); next != freeByAddress_.end() && next->first < segmentEnd) {
      extent += next->second;
      removeFree(next->first);
    }
    if (auto after = freeByAddress_.lower_bound(block); after != freeByAddress_.begin()) {
      auto before = std::prev(after);
      if (before->first >= segment->first && before->first + before->second == block) {
        block = before->first;
        extent += before->second;
        removeFree(before->first);
      }
    }
    addFree(block, extent);
  }

  std::size_t mappedBytes() const { return mappedBytes_; }
  std::size_t freeBytes() const { return freeBytes_; }
  std::int64_t reuses() const { return reuses_; }
  std::int64_t maps() const { return maps_; }
  std::int64_t unmaps() const { return unmaps_; }

private:
  bool mapSegment(std::size_t bytes) {
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
      return false;
    segments_.emplace(static_cast<char*>(base), bytes);
    mappedBytes_ += bytes;
    ++maps_;
    addFree(static_cast<char*>(base), bytes);
    return true;
  }

  void unmapFreeSegments() {
    for (auto segment = segments_.begin(); segment != segments_.end();) {
      auto free = freeByAddress_.find(segment->first);
      if (free == freeByAddress_.end() || free->second != segment->second) {
        ++segment;
        continue;
      }
      removeFree(segment->first);
      munmap(segment->first, segment->second);
      mappedBytes_ -= segment->second;
      ++unmaps_;
      segment = segments_.erase(segment);
    }
  }

  void addFree(char* start, std::size_t extent) {
    freeByAddress_.emplace(start, extent);
    freeBySize_.emplace(extent, start);
    freeBytes_ += extent;
  }

  void removeFree(char* start) {
    auto found = freeByAddress_.find(start);
    freeBySize_.erase({found->second, start});
    freeBytes_ -= found->second;
    freeByAddress_.erase(found);
  }

  std::map<char*, std::size_t> segments_;      // base -> extent
  std::map<char*, std::size_t> freeByAddress_; // free range start -> extent
  std::set<std::pair<std::size_t, char*>> freeBySize_;
  std::size_t mappedBytes_ = 0, freeBytes_ = 0;
  std::int64_t reuses_ = 0, maps_ = 0, unmaps_ = 0;
};

// The state every allocation shares; leaked on purpose, since tensors may be freed while static
// objects are destroyed at exit.
class HostMemory {
public:
  void* allocate(std::size_t bytes) {
    if (bytes == 0)
      return nullptr;
    TORCH_CHECK(bytes <= SIZE_MAX - kPage - kAlignment, "cleave's CPU allocator: ", bytes, " bytes is too large");
    const std::size_t withHeader = bytes + kAlignment;
    std::size_t blockBytes = 0;
    void* block = nullptr;
    if (withHeader >= kLargeBlock) {
      std::lock_guard lock(mutex_);
      std::tie(block, blockBytes) = segments_.take(roundUpToPage(withHeader));
    } else {
      block = takeSmallBlock(withHeader);
    }
    TORCH_CHECK(block != nullptr, "cleave's CPU allocator: out of memory allocating ", bytes, " bytes");
    auto* header = static_cast<BlockHeader*>(block);
    header->requestedBytes = bytes;
    header->blockBytes = blockBytes;
    countInUse(static_cast<std::int64_t>(bytes));
    return static_cast<char*>(block) + kAlignment;
  }

  void release(void* data) {
    if (data == nullptr)
      return;
    BlockHeader* header = headerOf(data);
    countInUse(-static_cast<std::int64_t>(header->requestedBytes));
    std::lock_guard lock(mutex_);
    if (header->blockBytes == 0) {
      const SizeClass size = sizeClassOf(header->requestedBytes + kAlignment);
      freeSmall_[size.index].push_back(header);
      smallBytesKept_ += size.bytes;
      return;
    }
    segments_.give(reinterpret_cast<char*>(header), header->blockBytes);
  }

  HostMemoryStats stats() {
    HostMemoryStats stats;
    stats.bytesInUse = bytesInUse_.load(std::memory_order_relaxed);
    stats.peakBytesInUse = peakBytesInUse_.load(std::memory_order_relaxed);
    std::lock_guard lock(mutex_);
    stats.largeBytesMapped = static_cast<std::int64_t>(segments_.mappedBytes());
    stats.largeBytesKept = static_cast<std::int64_t>(segments_.freeBytes());
    stats.largeReuses = segments_.reuses();
    stats.largeMaps = segments_.maps();
    stats.largeUnmaps = segments_.unmaps();
    stats.smallBytesKept = static_cast<std::int64_t>(smallBytesKept_);
    stats.smallReuses = smallReuses_;
    return stats;
  }

  // Held across fork() (base/isolated_call.h, the launcher): the child gets the kept blocks in a
  // consistent state, never a mutex that a thread which does not exist there was holding.
  void lockForFork() { mutex_.lock(); }
  void unlockAfterFork() { mutex_.unlock(); }

  void resetPeak() { peakBytesInUse_.store(bytesInUse_.load(std::memory_order_relaxed), std::memory_order_relaxed); }

private:
  // A kept block of the size's class, else a new one from the C library (kept once freed).
  void* takeSmallBlock(std::size_t bytes) {
    const SizeClass size = sizeClassOf(bytes);
    {
      std::lock_guard lock(mutex_);
      std::vector<void*>& kept = freeSmall_[size.index];
      if (!kept.empty()) {
        void* block = kept.back();
        kept.pop_back();
        smallBytesKept_ -= size.bytes;
        ++smallReuses_;
        return block;
      }
    }
    void* block = nullptr;
    return posix_memalign(&block, kAlignment, size.bytes) == 0 ? block : nullptr;
  }

  void countInUse(std::int64_t delta) {
    const std::int64_t now = bytesInUse_.fetch_add(delta, std::memory_order_relaxed) + delta;
    std::int64_t peak = peakBytesInUse_.load(std::memory_order_relaxed);
    while (now > peak && !peakBytesInUse_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }

  std::atomic<std::int64_t> bytesInUse_{0};
  std::atomic<std::int64_t> peakBytesInUse_{0};
  std::mutex mutex_; // guards segments_ and the small blocks kept
  Segments segments_;
  std::array<std::vector<void*>, kSmallClasses> freeSmall_; // by size class, the last freed on top
  std::size_t smallBytesKept_ = 0;
  std::int64_t smallReuses_ = 0;
};

HostMemory& hostMemory() {
  static auto* memory = new HostMemory;
  return *memory;
}

void releaseBlock(void* data) { hostMemory().release(data); }

class KeepingCpuAllocator final : public HostAllocatorBase {
public:
  c10::DataPtr allocateBytes(std::size_t bytes) const override {
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

at::Tensor emptyInOwnMapping(const std::vector<std::int64_t>& dims, at::ScalarType type) {
  const std::int64_t elements = c10::multiply_integers(dims);
  const std::size_t bytes = static_cast<std::size_t>(elements) * c10::elementSize(type);
  if (bytes == 0)
    return at::empty(dims, at::TensorOptions().dtype(type));
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    throw std::bad_alloc();
  return at::from_blob(base, dims, [bytes](void* mapped) { munmap(mapped, bytes); },
                       at::TensorOptions().dtype(type));
}

void resetHostMemoryPeak() { hostMemory().resetPeak(); }

} // namespace cleave::runtime
