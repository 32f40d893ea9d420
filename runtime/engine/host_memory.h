// runtime/engine/host_memory.h - ATen's CPU memory in cleave: large blocks kept by size between runs and
// training steps, and counted.
//
// Why: a run frees its activations, and a training step its activations, autograd buffers and
// gradients together at its end; the next one allocates the same sizes again. glibc gives large
// freed blocks back to the kernel (blocks over its mmap threshold are unmapped, the heap's top is
// trimmed), so the next run or step faults every page in again. Keeping them in glibc's heap
// (mmap and trim thresholds raised) was tried first and measured fragile: glibc's per-thread
// cache pins small chunks between the freed large blocks, and the same ten runs of a 4 MiB chain
// then faulted 2 to 4,113 pages depending only on the heap's layout (the model path's length).
// So blocks of 128 KiB and more are carved here from segments of their own (32 MiB, or the block),
// which stay mapped. Smaller ones come from the C library once and are then kept here by size
// class: glibc's aligned allocation cost more than the kernels of a small model's small tensors
// (posix_memalign, its free and malloc_consolidate were 8% of MobileNetV3-Small's main thread). A first version kept freed large blocks by size, each reused only for a size
// within 1/8 of its own, within twice the peak in use: DenseNet-121 with --no-fusion, whose sizes
// are many and change every layer, then unmapped and mapped blocks every run (8,200 faults a run;
// 1.46x the run time of the build before).
//
// What it guarantees:
// - A large request takes the best fitting free range (split when the rest can serve another
//   block); a freed block merges with the free ranges beside it. A run that repeats the previous
//   one maps and faults nothing new.
// - Segments are unmapped only when wholly free and a request fits no free range.
// - Every block is 64-byte aligned (ATen's and oneDNN's requirement); the allocator is thread-safe
//   (one mutex around the segments; counters are atomic) and fork-safe (the mutex is held across
//   fork).
// - A small request (under 128 KiB with the header) takes a kept block of its size class (64-byte
//   steps to 1 KiB, then 8 classes per doubling: at most 1/8 over), else a new one from the C
//   library. Small blocks are never given back: what is kept is at most the peak of each class.
// Cost: an allocation or free of a large block is O(log R) in the R free ranges (O(S) more in the S
// segments when it maps one); of a small one O(1) under the mutex (the C library's malloc on a miss).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace cleave::runtime {

// Installs the allocator as ATen's CPU allocator (c10::SetCPUAllocator), process-wide. Tensors
// allocated before keep their own deleter. Idempotent; returns false if ATen kept another
// allocator of higher priority.
bool keepFreedHostMemory();

struct HostMemoryStats {
  std::int64_t bytesInUse = 0;     // requested bytes of live tensors allocated since installation
  std::int64_t peakBytesInUse = 0; // the largest bytesInUse since the last resetHostMemoryPeak
  std::int64_t largeBytesMapped = 0; // the segments of large blocks, in use and free
  std::int64_t largeBytesKept = 0;   // of those, free for reuse
  std::int64_t largeReuses = 0;      // large allocations served from free ranges
  std::int64_t largeMaps = 0;        // segments mapped
  std::int64_t largeUnmaps = 0;      // wholly free segments given back to the kernel
  std::int64_t smallBytesKept = 0;   // small blocks freed and kept for reuse (their classes' bytes)
  std::int64_t smallReuses = 0;      // small allocations served from kept blocks
};

// Counters since installation (zero before it).
HostMemoryStats hostMemoryStats();

// Starts a new peak at the bytes in use now: the peak of one run.
void resetHostMemoryPeak();

// An uninitialized tensor in a mapping of its own, unmapped when it is freed: for a tensor made
// once and let go for good, whose pages should leave the process then (a convolution weight's
// plain copy, released once a reordered copy holds it: onednn::holdOnlyReordered). From the kept
// segments its block would stay resident, and from the C library's heap too (keepCLibraryHeap:
// never trimmed). Not counted in hostMemoryStats(). Throws std::bad_alloc when mapping fails.
at::Tensor emptyInOwnMapping(const std::vector<std::int64_t>& dims, at::ScalarType type);

} // namespace cleave::runtime
