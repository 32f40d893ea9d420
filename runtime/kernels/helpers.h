// runtime/kernels/helpers.h - what the kernel families share: their registration, subgraph and
// sequence helpers, the products and convolutions every family runs through (on the fast paths of
// the wing serving the operands' device where it takes them, runtime/engine/fast_paths.h, else on
// ATen), layouts, axes and dtypes. Kernel files only;
// the engine reaches kernels through its table (runtime/engine/kernel.h).
// Complexity: each helper says its own; most are O(operand size).
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/engine/fast_paths.h"
#include "runtime/engine/kernel.h"
#include "runtime/engine/tensors.h"

namespace cleave::runtime {

// Registration, one function per kernel file (families.cpp calls them all).
void registerElementwiseKernels(KernelTable& table);
void registerShapeKernels(KernelTable& table);
void registerNnKernels(KernelTable& table);
void registerAttentionKernels(KernelTable& table);
void registerReduceKernels(KernelTable& table);
void registerControlKernels(KernelTable& table);
void registerLossKernels(KernelTable& table);
void registerIndexKernels(KernelTable& table);
void registerQuantKernels(KernelTable& table);
void registerResizeKernels(KernelTable& table);
void registerRecurrentKernels(KernelTable& table);
void registerSignalKernels(KernelTable& table);
void registerSpatialKernels(KernelTable& table);
void registerSequenceKernels(KernelTable& table);
void registerTextKernels(KernelTable& table);
void registerRandomKernels(KernelTable& table);

// Helpers shared by kernel files.
// Runs a subgraph executor (KernelContext::subgraph) on `feeds` and returns its graph outputs in
// order, its copies between host and device counted in c's run statistics; throws KernelError
// with its message when it fails (Loop, Scan, If, SequenceMap).
std::vector<at::Tensor> runSubgraph(const KernelContext& c, Executor& body, const TensorMap& feeds);
// x[..., K] times a 2-D weight, with `weightIsNK` telling whether it is laid out [N, K] (Gemm's
// transB, torch's Linear) or [K, N]; plus an optional bias [N]. On the wing's fast path where it
// takes them (the CPU wing's: oneDNN in float32, the reordered weight kept in the node's state
// while the same weight tensor comes back: a parameter, or a weight another submodel forwards);
// else on ATen. `activation` (GELU, its tanh form, Relu) applied to the result, inside the product
// where the wing runs it.
at::Tensor linear(KernelContext& c, const at::Tensor& x, const at::Tensor& weight, bool weightIsNK,
                  const at::Tensor& bias, ProductActivation activation = ProductActivation::None);
// ONNX Conv of x by w (+ bias) with the node's strides, dilations, group and pads / auto_pad. 1-D,
// 2-D or 3-D on the wing's fast path where it takes them (the CPU wing's: float32 without
// autograd on oneDNN, channels-last, the weight reordered once and kept in the node's state; in a
// build without libdnnl, 2-D float32 ones in ATen's blocked layout). Anything else (other dtypes
// too) runs on at::convolution.
at::Tensor convolution(KernelContext& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);
// convolution() then `post` (the residual added, then the activation): one call on the wing's fast
// path where it takes the operands (the CPU wing's: oneDNN's post-ops, 2-D or 3-D, float32, no
// autograd, the residual of the output's shape), else convolution() followed by the same ATen ops.
// `residualIsScratch` (KernelContext::mayOverwrite): the output may be written into the residual's
// buffer instead of a copy of it.
at::Tensor fusedConvolution(KernelContext& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                            const ConvolutionEpilogue& post, const at::Tensor& residual, bool residualIsScratch = false);
// ONNX ConvTranspose of x by w (+ bias) with the node's strides, dilations, group, pads,
// output_padding and output_shape / auto_pad, then Relu when `thenRelu`. 2-D on the wing's fast
// path where it takes them (the CPU wing's: float32 without autograd on oneDNN's deconvolution,
// the weight reordered once, kept in the node's state).
// Otherwise the unpadded transposed convolution (output_padding included) on ATen, then cropped
// (or, for negative pads, extended with zeros), then the bias.
at::Tensor transposedConvolution(KernelContext& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                                 bool thenRelu = false);
// A product with broadcast batch dims (attention's Q K^T and P V): one call on the wing's fast path
// (the CPU wing's: oneDNN in float32), else at::matmul.
at::Tensor batchedMatmul(const at::Tensor& a, const at::Tensor& b);
// Inference BatchNormalization (parameters `from`: scale, shift, mean, variance; `epsilon`) of the
// concatenation of `pieces` along dim 1, then Relu when `thenRelu`: x * m + s per channel with
// m = scale / sqrt(variance + epsilon) and s = shift - mean * m, computed once while the same
// parameter tensors come back (kept in the node's cache). One piece: a BatchNormalization
// (+Relu, DenseNet's pre-activation after a convolution's block); several: DenseNet's Concat ->
// BatchNormalization -> Relu, whose concatenation is never made (scaleShiftConcatenation).
// Measured on a channels-last [1, 224, 56, 56]: 200 us in one pass, against 306 us for ATen's
// addcmul then an in-place Relu (the form before) and more for at::batch_norm then Relu.
// Autograd, other dtypes, layouts or shapes: at::cat, at::batch_norm, at::relu.
at::Tensor batchNormInference(KernelContext& c, const std::vector<at::Tensor>& pieces, const std::vector<at::Tensor>& from,
                              double epsilon, bool thenRelu);
// y = x * multiplier + shift per channel (dim 1) over the concatenation of `pieces` along dim 1,
// then max(y, 0) when `relu` (NaN stays NaN), in one pass: each piece read once, the output
// written once. Pieces: float32 CPU tensors equal but for dim 1, all rows of channels
// (channelRowStride: channels-last, or channel slices of it; the output is channels-last dense)
// or all contiguous (so is the output); multiplier and shift: contiguous float32 of the output's
// channels. Undefined for anything else (the caller falls back). Inner loops built for
// AVX-512, AVX2 and the base ISA on x86-64; O(output) work, parallel over rows or planes.
at::Tensor scaleShiftConcatenation(const std::vector<at::Tensor>& pieces, const at::Tensor& multiplier,
                                   const at::Tensor& shift, bool relu);
// RMSNormalization of dense float32 x over rows of scale.numel() (its last dims), scale (dense
// float32, the normalized dims' shape) multiplied in: x / sqrt(mean(x^2) + epsilon) * scale, in one
// pass per row, float32 throughout (ONNX's default stash_type). Undefined for anything else.
// O(x) work, parallel over rows (decoder_rows.cpp).
at::Tensor rmsNormalizeRows(const at::Tensor& x, const at::Tensor& scale, float epsilon);
// RotaryEmbedding of dense float32 x [batch, sequence, heads, head] (sequenceSecond) or [batch,
// heads, sequence, head], into a dense tensor of x's shape: each head's first `dim` values rotated
// in pairs (halves, or neighbours when `interleaved`) by cos and sin (dense float32, dim / 2 last),
// [positions, dim / 2] looked up by `positions` ([batch, sequence] int64) when it is defined, else
// [batch, sequence, dim / 2]; the rest copied. A position outside the caches is a KernelError.
// Undefined for other dtypes or shapes. O(x) work, parallel over rows (decoder_rows.cpp).
at::Tensor rotateRows(const at::Tensor& x, bool sequenceSecond, const at::Tensor& cos, const at::Tensor& sin,
                      const at::Tensor& positions, std::int64_t dim, bool interleaved);
// Whether `cache` holds the fold of exactly these tensors (by identity; undefined matches undefined).
bool holdsFoldOf(const KernelCache& cache, const std::vector<at::Tensor>& from);
// A two-operand Einsum equation that is a batched matrix product (attention's "bhid,bhjd->bhij"
// and "bhij,bhjd->bhid"): batch letters leading both operands and the output in the same order,
// then one contracted and one kept letter per operand, in either order; run as batchedMatmul() on
// transposed views. Undefined for any other equation (ellipses, repeated letters, a letter summed
// away, broadcast batch dims): the caller runs at::einsum.
at::Tensor einsumAsBatchedMatmul(std::string equation, const at::Tensor& a, const at::Tensor& b);
// ONNX MatMul, plus an optional bias added after it (a fused MatMul+Add): activations times a
// 2-D weight go through linear() (a 1-D bias [N] of the same dtype inside the product), any
// other product through batchedMatmul(); a bias of another shape is added (broadcast) after.
// `activation`: then that, as in linear().
// An undefined `b` is the node's packed weight (KernelCache::packedWeight): the product reads it
// packed, or a dense copy of it where the packed product does not take the operands.
at::Tensor matmul(KernelContext& c, const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias = at::Tensor(),
                  ProductActivation activation = ProductActivation::None);
// A product's right operand i: its tensor, or undefined when the node's cache holds it packed.
// Throws KernelError when it is neither.
at::Tensor productWeight(const KernelContext& c, std::size_t i);
// Indices as int64 with negative entries counted from the end of an axis of `size` elements.
at::Tensor fixNegativeIndices(const at::Tensor& indices, std::int64_t size);
std::int64_t normalizeAxis(std::int64_t axis, std::int64_t rank); // throws KernelError when out of range
at::ScalarType onnxScalarType(std::int64_t onnxDtype);              // throws KernelError when unknown
// ONNX Cast of `x` to `target`: numbers through ATen; to and from string tensors as ONNX's
// reference (numpy) writes and reads them (runtime/kernels/text.cpp). Throws KernelError naming a
// string that is not a number. To an 8-bit float, `saturate` (Cast-19's attribute, default 1)
// clamps to the type's finite range; otherwise what overflows is NaN or infinity.
at::Tensor castTo(const at::Tensor& x, ir::DType target, bool saturate = true);
// Equal of two string tensors, broadcasting (runtime/kernels/text.cpp).
std::vector<at::Tensor> stringsEqual(const at::Tensor& a, const at::Tensor& b);
// ONNX's 2-D coercion (Flatten, pre-13 Softmax): [prod(dims before axis), prod(dims from axis)].
at::Tensor flattenTo2d(const at::Tensor& x, std::int64_t axis);
// ONNX Softmax (or LogSoftmax) of x with the node's `axis` attribute (none: the default) at
// `opset`: along the axis from 13 on, over x coerced to 2-D at the axis before (on the wing's fast
// path where it takes x; over x when `inPlace`). softmaxIsOverLastAxis: whether that is a softmax
// along the last axis of a rank-`rank` tensor. Throw KernelError for an axis out of range.
at::Tensor onnxSoftmax(const at::Tensor& x, std::optional<std::int64_t> axis, std::int64_t opset, bool logarithm,
                       bool inPlace);
bool softmaxIsOverLastAxis(std::optional<std::int64_t> axis, std::int64_t opset, std::int64_t rank);
// GELU (exact, or "tanh") of x, in x's own memory order: a dense tensor that is not contiguous (a
// convolution's channels-last output) runs ATen's contiguous kernel on the view that is, and the
// result has x's strides. ATen 1.13 takes another, slower kernel for channels-last tensors: 13.3
// against 4.4 ms on [1, 256, 112, 112] (MaxViT's first block).
at::Tensor geluInMemoryOrder(const at::Tensor& x, c10::string_view approximate = "none");
// ONNX's channel shuffle of the concatenation x of `pieces` along dim 1 (Reshape to [N, groups,
// C / groups, spatial...], Transpose of dims 1 and 2, Reshape back): output channel j * groups + i
// is x's channel i * (C / groups) + j. One pass from the pieces (the concatenation is never made).
// Pieces: float32 CPU tensors equal but for dim 1, all rows of channels (channelRowStride; then
// each group's channels must lie within one piece, and the output is channels-last dense) or all
// contiguous (so is the output). Undefined for anything else, or C not divisible by `groups`.
// O(output); two groups (ShuffleNet's) interleave rows in a vectorized loop.
at::Tensor shuffleChannels(const std::vector<at::Tensor>& pieces, std::int64_t groups);
// x as a channels-last dense tensor (ChannelsLast3d for 5-D): x itself when it is one. A contiguous
// float32 CPU tensor [N, C, spatial...] of at most 4 channels (a model's image input) has its planes
// interleaved in one vectorized pass, parallel over spans of positions: 12 us against ATen's 70 us
// for a [1, 3, 224, 224] on 2 threads (ATen copies it element by element). Anything else:
// ATen's contiguous(ChannelsLast). O(numel).
at::Tensor channelsLastDense(const at::Tensor& x);
// ONNX Reshape's target for `sizes`: a 0 entry copies the input's dim there unless `allowZero`,
// and one -1 is inferred. Throws KernelError when it does not fit.
std::vector<std::int64_t> reshapeTarget(at::IntArrayRef sizes, std::vector<std::int64_t> shape, bool allowZero);
// The distance between consecutive rows when `t` ([N, C, spatial...], rank >= 2) is rows of its C
// channels, channels innermost: stride(1) == 1 and the batch and spatial dims nest over rows of
// that stride, at least C (ATen's channels-last for any rank, or a channel slice of such a
// tensor); 0 when it is not. A 2-D tensor or one with a single row qualifies when its channels
// are contiguous (its row stride is then C).
std::int64_t channelRowStride(const at::Tensor& t);
// GlobalAveragePool of a float32 CPU tensor [N, C, spatial...] (4-D or 5-D) stored channels-last:
// per batch entry, the spatial rows summed in fixed chunks of 256 (vectorized adds over the C
// contiguous channels, chunks in parallel), the chunk sums added in order, divided by the row
// count; the result [N, C, 1, 1(, 1)] does not depend on the thread count. Undefined for any
// other tensor (the caller pools on oneDNN or ATen). O(N x C x spatial), one pass. oneDNN's
// pooling, one window over the plane, walks the window per channel block: on EfficientNet-B0's
// seventeen pools (2 threads, interleaved profiles) 630-660 us in all against 380-400 us.
at::Tensor globalAverageChannelsLast(const at::Tensor& x);
// [steps, batch] time indices that reverse each batch entry's first lengths[b] steps and keep the
// rest in place (ReverseSequence, the reverse direction of RNN / GRU / LSTM); its own inverse.
at::Tensor reversedTimeIndex(const at::Tensor& lengths, std::int64_t steps);

} // namespace cleave::runtime
