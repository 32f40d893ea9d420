// runtime/cuda/cuda_wing.h - the CUDA wing: how executors on a CUDA device hold weights, what the
// device computes with, and what it measures. Built only against a libtorch with CUDA, as a
// library of its own (libcleave_cuda.so, with the NCCL transport), which the runtime loads on the
// first use of a CUDA device or of NCCL (runtime/model/wing_library.h); loading it installs it
// (runtime/engine/device_wing.h). The engine never names it.
//
// Guarantees, for every executor whose device is a CUDA device:
//   - weights are held as loaded, on the device (no private layout: cuBLAS and cuDNN take
//     ATen's dense tensors), shape arithmetic's values on the host (value_placement.h);
//   - numerics: float32 products and convolutions stay float32 unless its switch kTf32
//     (cuda_switches.h; cleave run --tf32) lets them run on TF32 tensor cores; cuDNN autotunes each convolution
//     shape once (its first run picks the fastest algorithm for that shape and keeps it);
//   - peakAllocatedBytes is the caching allocator's peak of allocated bytes since the last
//     reset, as torch.cuda.max_memory_allocated counts them; synchronize waits for the device;
//   - fast paths: a product with its bias and ReLU or tanh-GELU runs as one cuBLASLt call with
//     that epilogue (cuda_fast_paths.cpp); attention runs as ATen's fused kernel;
//   - record captures a CUDA graph (at::cuda::CUDAGraph, as torch.cuda.graph does): the warm-up
//     and the capture run on a side stream of the device, the capture's memory comes from a pool
//     of its own that the recording keeps, and a capture the device refuses (a synchronization
//     inside it) is ended, its error cleared, and reported as Unsupported naming the step.
// Complexity: O(1) per hook; configure sets three process-wide flags.
// The wing has no API outside its library: it installs itself as its library loads (a static
// registration in cuda_wing.cpp) and is reached through the engine's hooks alone.
#pragma once

namespace cleave::runtime {
class FastPaths;
namespace cuda {

// The wing's fast paths (cuda_fast_paths.cpp), for CudaWing::fastPaths.
const FastPaths* cudaFastPaths();

} // namespace cuda
} // namespace cleave::runtime
