// runtime/host_memory.h - how the process's C allocator (glibc malloc, under ATen's CPU
// allocator) keeps memory that a training step frees.
//
// Why: a training step frees its activations, autograd buffers and gradients together at its end.
// With glibc's defaults that free space is handed back to the kernel (the heap's top is trimmed
// past 2x the dynamic mmap threshold, and blocks over that threshold are unmapped), so the next
// step faults every page in again. Measured on bench/train_bench.py's MLP in one process: about
// 3,000 minor faults per step with the defaults, none with this (47k faults for 4 steps or 24);
// its steps took 0.81x the time (bench/train.sh against the build before, interleaved).
#pragma once

#include <cstddef>

namespace cleave::runtime {

// Blocks up to 32 MiB (glibc's largest mmap threshold) come from the heap, and the heap is never
// trimmed, so a freed block stays resident for the next step's allocation of its size. Process-
// wide and idempotent; the peak resident set is unchanged (what is kept was resident at the peak).
// Returns false where the C library takes no such setting (not glibc, or a sanitizer's allocator).
bool keepFreedHostMemory();

// Bytes glibc's threshold allows from the heap (blocks above it are still mapped and unmapped).
inline constexpr std::size_t kLargestHeapBlock = std::size_t{32} << 20;

} // namespace cleave::runtime
