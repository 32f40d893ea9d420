// runtime/host_memory.h - how the process's C allocator (glibc malloc, under ATen's CPU
// allocator) keeps memory that a training step frees.
//
// Why: a training step frees its activations, autograd buffers and gradients together at its end,
// and a run of a model its activations. With glibc's defaults that free space may go back to the
// kernel (the heap's top is trimmed past 2x the dynamic mmap threshold, and blocks over that
// threshold are unmapped), so the next step or run faults every page in again. Whether it does
// depends on the order of earlier frees. Measured:
// - bench/train_bench.py's MLP in one process: about 3,000 minor faults per step with the
//   defaults, none with this (47k faults for 4 steps or 24); its steps took 0.81x the time
//   (bench/train.sh against the build before, interleaved).
// - DCGAN's generator (tools/export_zoo.py dcgan): 2,600 faults per run with the defaults, none
//   with this; 17-18 ms a run instead of 21-22 ms. Peak resident set +5 MiB (215 -> 221 MiB);
//   resnet50, mobilenet_v3_large and bert_base, which faulted nothing per run either way, +7-9 MiB.
#pragma once

namespace cleave::runtime {

// Blocks up to 32 MiB (glibc's largest mmap threshold) come from the heap, and the heap is never
// trimmed, so a freed block stays resident for the next step's allocation of its size. Process-
// wide and idempotent; the peak resident set is unchanged (what is kept was resident at the peak).
// Returns false where the C library takes no such setting (not glibc, or a sanitizer's allocator).
bool keepFreedHostMemory();

} // namespace cleave::runtime
