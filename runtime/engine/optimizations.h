// runtime/engine/optimizations.h - the runtime's optimizations a run may turn off, as plain flags.
// It includes nothing of ATen, so that the cleave executable parses them (cli/runtime_options.h)
// without loading the runtime library. O(1).
#pragma once

namespace cleave::runtime {

// Optimizations a run may turn off (the weight and layout ones are the CPU wing's to apply:
// runtime/cpu/cpu_wing.h), to measure what each one gives or to rule it out when
// debugging (cleave run --no-fusion / --no-blocked-layout). Results agree either way, up to
// float rounding.
struct Optimizations {
  bool fusion = true;        // run fused node groups (fusion.h) as one kernel each
  // Keep convolution activations in oneDNN's blocked layout between ops (onednn.h's blocked
  // activations; ATen's mkldnn tensors when built without libdnnl) while every reader takes them.
  bool blockedLayout = true;
  // Hold a float32 weight that only MatMuls read (as their right operand) in oneDNN's own product
  // layout, as the only copy (onednn::PackedWeight), and one that only convolutions read in the
  // layouts their primitives want, without the plain one once a copy converts back
  // (onednn::holdOnlyReordered; cleave run --no-packed-weights: both kept plain).
  bool packedWeights = true;
  // Reuse the results of small pure ops (shape arithmetic) whose operands repeat from the last run
  // (small_op_memo.h; cleave run --no-shape-memo).
  bool rememberShapeArithmetic = true;
  // Let 3x3 convolutions run as Winograd's where it pays (onednn::usesWinograd): faster, but its
  // weights are 1.8-4x the plain ones (cleave run --no-winograd: less memory, slower).
  bool winograd = true;
  // Let 2-D convolutions with kernels larger than 1x1 run in oneDNN's blocked layout, with
  // reorders around them, where its channels-last kernel is not a native one (onednn::runsBlocked:
  // AVX2; cleave run --no-blocked-convolutions).
  bool blockedConvolutions = true;
  // Not the executor's: a cut model's neighbouring submodules on one backend run as one joined
  // graph, fusing across their seams (cut_model.h).
  bool joinSeams = true;
  // Not on by default: let a CUDA device's float32 products and convolutions run on TF32 tensor
  // cores (cleave run --tf32; the CUDA wing sets it, runtime/cuda/cuda_wing.cpp). Faster, with
  // about 1e-3 relative error, which float32's verify tolerances do not allow; off, float32 stays
  // float32 (PyTorch's default for products; cleave's for convolutions too).
  bool tf32 = false;
};

} // namespace cleave::runtime
