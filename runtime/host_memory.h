// runtime/host_memory.h - ATen's CPU memory in cleave: large blocks kept by size between runs and
// training steps, and counted.
//
// Why: a run frees its activations, and a training step its activations, autograd buffers and
// gradients together at its end; the next one allocates the same sizes again. glibc gives large
// freed blocks back to the kernel (blocks over its mmap threshold are unmapped, the heap's top is
// trimmed), so the next run or step faults every page in again. Keeping them in glibc's heap
// (mmap and trim thresholds raised) was tried first and measured fragile: glibc's per-thread
// cache pins small chunks between the freed large blocks, and the same ten runs of a 4 MiB chain
// then faulted 2 to 4,113 pages depending only on the heap's layout (the model path's length).
// So blocks of 128 KiB and more are mapped here, kept on their own, and reused by size; smaller
// ones come from the C library, whose heap is never trimmed (kept for the next run too).
//
// What it guarantees:
// - A freed large block is reused for a later request of its size (up to 1/8 larger), so a run or
//   step that repeats the previous one maps and faults nothing new.
// - Mapped large blocks (in use and kept) stay within twice the largest bytes ever in use in large
//   blocks: on a miss, kept blocks are unmapped, largest first, until the new one fits.
// - Every block is 64-byte aligned (ATen's and oneDNN's requirement); the allocator is thread-safe
//   (one mutex around the kept blocks; counters are atomic).
// Cost: an allocation or free of a large block is O(log K) in the K kept blocks; small ones add
// two atomic adds to the C library's malloc.
#pragma once

#include <cstdint>

namespace cleave::runtime {

// Installs the allocator as ATen's CPU allocator (c10::SetCPUAllocator), process-wide. Tensors
// allocated before keep their own deleter. Idempotent; returns false if ATen kept another
// allocator of higher priority.
bool keepFreedHostMemory();

struct HostMemoryStats {
  std::int64_t bytesInUse = 0;     // requested bytes of live tensors allocated since installation
  std::int64_t peakBytesInUse = 0; // the largest bytesInUse since the last resetHostMemoryPeak
  std::int64_t largeBytesMapped = 0; // large blocks, in use and kept, whole pages
  std::int64_t largeBytesKept = 0;   // of those, freed and kept for reuse
  std::int64_t largeReuses = 0;      // large allocations served from kept blocks
  std::int64_t largeMaps = 0;        // large allocations that mapped a new block
  std::int64_t largeUnmaps = 0;      // kept blocks given back to the kernel to stay in bounds
};

// Counters since installation (zero before it).
HostMemoryStats hostMemoryStats();

// Starts a new peak at the bytes in use now: the peak of one run.
void resetHostMemoryPeak();

} // namespace cleave::runtime
