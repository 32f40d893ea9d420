// runtime/cpu/onednn.h - float32 matrix products on oneDNN, called directly (the same libdnnl that
// Debian's libtorch uses inside ATen).
//
// Why not ATen: this libtorch's BLAS may be a slow generic one, and ATen's mkldnn_linear
// reorders its weight into the primitive's preferred layout on every call (measured: a sixth of
// a BERT-base run). Here a product with a weight keeps the reordered weight and the primitive
// between runs, operands are read in place from ATen tensors' memory (no to_mkldnn/to_dense
// copies), and a batched product with broadcast batch dims is one primitive call.
//
// Every function returns an undefined tensor when oneDNN cannot take the operands (not built
// with it, not float32 on the CPU, a layout the primitive refuses); the caller then uses ATen.
// Complexity: the first call with a weight pays primitive creation and the weight's reorder; later
// calls only the product.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <memory>
#include <unordered_map>
#include <vector>

#include "runtime/engine/fast_paths.h"

namespace cleave::runtime::onednn {

// Whether this build calls oneDNN (CMake found libdnnl-dev).
bool available();

// Bytes of weight copies this process holds for oneDNN now: packed product weights, products'
// and convolutions' reordered weights (not ATen tensors, so not in hostMemoryStats()).
std::size_t heldWeightBytes();

// A weight reordered once for one product shape, with its primitive (opaque to callers).
struct PackedProduct;

// x[..., K] times a 2-D weight, [K, N] or [N, K] when `weightIsNK`, plus an optional 1-D bias
// [N]. `packed` keeps the reordered weight between calls: it is rebuilt when the weight tensor
// (by identity), the row count, the bias presence or `activation` changes. A product of at most 4 rows (a
// batch-1 classifier head) runs as oneDNN's sgemm on the weight as stored, with no copy and
// nothing in `packed` (3-4x faster there than the primitive on the [N, K] copy).
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, bool weightIsNK, const at::Tensor& bias,
                  ProductActivation activation, std::shared_ptr<PackedProduct>& packed);

// A [K, N] float32 weight held only in the layout oneDNN's matmul primitive picks for this CPU
// (Tag::any: blocked for its brgemm kernels), for a weight that nothing but products reads. The
// same for every row count, bias and GELU (checked on this oneDNN for 1 to 4096 rows). Measured
// (interleaved, 2 threads): 5-11% faster than the [N, K] rows linear() reads in place at 128 and
// 197 rows, and 30 against 40 us for sgemm at one row of [960] x [960, 1280].
struct PackedWeight;

// Whether packing a [K, N] weight pays on this CPU: oneDNN's own layout for it is blocked (its
// brgemm kernels, AVX-512 and up). Where that layout is plain (oneDNN 2.6 on AVX2 runs products on
// gemm:jit and picks [K, N] itself), the copy gains nothing, and [N, K] rows read in place are
// faster: on an AMD EPYC (AVX2) BERT-base's 96 products took 5.0 ms each on rows against 7.5 ms
// on the [K, N] copy (ONEDNN_VERBOSE), the whole model 179 against 225 ms (bench/RESULTS.md).
bool packsProductWeight(std::int64_t k, std::int64_t n);
// The packed copy of a [K, N] view (any strides); null where oneDNN does not take it.
std::shared_ptr<PackedWeight> packWeight(const at::Tensor& kn);
// A dense [K, N] copy of it (for readers other than the products, and fallbacks).
at::Tensor unpackWeight(const PackedWeight& weight);
std::array<std::int64_t, 2> packedWeightDims(const PackedWeight& weight); // {K, N}

// linear() on a packed weight: x[..., K] times it, plus an optional 1-D bias [N], then
// `activation`. `packed` keeps the primitive (and, for a primitive that wants another layout, its
// own reordered copy); rebuilt when the weight, the row count, the bias or the activation change.
// Undefined where it does not take the operands (the caller then unpacks).
at::Tensor linearPacked(const at::Tensor& x, const std::shared_ptr<const PackedWeight>& weight, const at::Tensor& bias,
                        ProductActivation activation, std::shared_ptr<PackedProduct>& packed);

// a[..., M, K] times b[..., K, N] with numpy broadcasting of the batch dims (both rank >= 2).
at::Tensor batchedMatmul(const at::Tensor& a, const at::Tensor& b);

// Softmax (or its logarithm) along `axis` of a contiguous tensor, on oneDNN's kernel for this CPU
// (1.3-1.4x faster than ATen 1.13's on attention's [heads, L, L] scores); undefined where it does
// not take x (not a dense float32 CPU tensor without autograd).
// With `inPlace` (x is the caller's to overwrite) the result is written over x.
at::Tensor softmax(const at::Tensor& x, std::int64_t axis, bool logarithm, bool inPlace);

// 2-D or 3-D pooling of x [N, C, (D,) H, W] on oneDNN's kernel, in x's own layout (channels-last
// stays so; ATen 1.13's max_pool3d took 19-80 ms per layer of S3D's channels-last values):
// Max (padding never wins), or Average counting the padding or not. Per-dim kernel, strides,
// dilations (Max only) and pads at either end; `ceil` rounds the output size up as ATen and ONNX
// do (a last window must start inside the input or its begin padding). Undefined where it does
// not take the operands: not a dense float32 CPU tensor without autograd, an Average counting
// padding whose ceil rounding would count cells past the end padding (ATen does not), or
// geometry oneDNN refuses (a pad as large as the kernel).
// Max pooling also takes a blocked activation (isBlockedActivation), pooled in its own layout: the
// output is one too with `mayReturnBlocked`, else channels-last. (Average pooling does not: its
// sums could round differently in another layout, and a cut model's pooling after a seam reads a
// channels-last value; a maximum is the same in any order.)
using PoolKind = runtime::PoolKind; // fast_paths.h
at::Tensor pool(const at::Tensor& x, PoolKind kind, const std::vector<std::int64_t>& kernel,
                const std::vector<std::int64_t>& strides, const std::vector<std::int64_t>& padBegin,
                const std::vector<std::int64_t>& padEnd, const std::vector<std::int64_t>& dilations, bool ceil,
                bool mayReturnBlocked = false);

// A convolution's output kept in oneDNN's blocked layout (nChw8c on AVX2) for the convolutions
// that read it next, rather than reordered to channels-last after one and back before the other.
// It is an ATen tensor of the output's dims whose data only this file reads: an opaque tensor
// (its own dispatch key, PrivateUse1), so an ATen op given one fails with an error instead of
// reading blocked data as plain. The executor hands such values only to kernels that take
// blocked operands (Layouts::DenseOrPrivate) and makes them dense for every other reader
// (toDense). Measured on an AMD EPYC (AVX2, 2 threads): bench_conv_layout's ResNet-50 trunk took
// 0.85x its channels-last time all blocked.
bool isBlockedActivation(const at::Tensor& t);
// Its values as a channels-last ATen tensor: one reorder, made once per value (later calls return
// the same tensor, which callers must not write); any other tensor as it is.
at::Tensor denseFromBlocked(const at::Tensor& t);

// What a convolution does to its output inside the same kernel (oneDNN post-ops): the engine's
// ConvolutionEpilogue (fast_paths.h).
using ConvPostOps = ConvolutionEpilogue;

// A convolution's reordered weight with its primitive, for one input shape (opaque to callers).
struct PackedConvolution;

// A stored weight reordered into one layout a convolution primitive wants (opaque to callers).
struct ReorderedWeight;
// A weight held only as reordered copies (holdOnlyReordered; opaque to callers).
struct OnlyReorderedWeight;

// The reordered weights of the convolutions that share it, by source weight (identity) and
// layout: each layout of each weight is made once, whichever nodes and input shapes want it.
// FCOS runs each of its head's eight 256x256x3x3 weights through five unfused Conv nodes, one
// per pyramid level; with a copy per node it held 51 reordered copies of them (163 MiB, more than
// the model's 124 MiB of weights). Holds its copies weakly: a copy lives while a packed
// convolution uses it, so a cache's evicted shapes free theirs; weights whose copies have all
// gone leave the map when it has doubled since the last sweep (a weight made anew every run, an
// op's result, would otherwise leave a key per run). Lookup: O(layouts of the weight), amortized.
struct ReorderedWeights {
  std::unordered_map<const void*, std::vector<std::weak_ptr<const ReorderedWeight>>> byWeight;
  std::size_t sweepAbove = 64; // map size that triggers the next sweep
  // The weights held here alone (holdOnlyReordered), by their stand-in's identity.
  std::unordered_map<const void*, std::shared_ptr<OnlyReorderedWeight>> onlyReordered;
};

// A float32 convolution weight that nothing but convolutions read, held in oneDNN's layouts alone
// (cpu_switches.h's kPackedWeights, as products' weights are): plain until the pool makes a copy of
// it in a layout that converts back (a direct kernel's blocked layout; Winograd's transformed
// weight does not), then only as its copies. That copy is kept for the pool's life; a layout
// wanted later, and ATen, get the plain weight back from it (one reorder). Kernels read the weight
// as its stand-in: a meta tensor of its dims and dtype, without data, whose identity convolution()
// looks up in the pool of the cache it is given. SSD300 held its 136 MB of weights twice (plain
// beside the direct kernel's copies); ONNX Runtime keeps a prepacked weight only.
// Returns the stand-in, or undefined where oneDNN cannot hold w (not a dense float32 CPU tensor of
// rank 4 or 5). O(1); the first copy in a convertible layout frees the plain tensor (when nothing
// else references it).
at::Tensor holdOnlyReordered(ReorderedWeights& pool, const at::Tensor& w);
// The dense weight behind a stand-in of `pool`: the plain tensor while it is held, else a copy
// reordered back from the kept copy (equal to it bit for bit: a reorder only moves values).
// Undefined when `standIn` is not one of `pool`'s.
at::Tensor plainWeight(const ReorderedWeights& pool, const at::Tensor& standIn);
// How many of `pool`'s weights are held only reordered now (their plain tensor released).
std::size_t releasedPlainWeights(const ReorderedWeights& pool);

// What a convolution node keeps between runs: a packed convolution (primitive and reordered
// weight) per input shape it has run at. Nodes that read one stored weight through the same fused
// kind share one cache (Executor::shareWeightCaches): a detector's head runs one weight over every
// pyramid level, and with a single entry each level rebuilt the others' primitive and reordered
// the weight again every run (RetinaNet: 16 Winograd weight reorders of 27 ms each per run).
// At most kMaxShapes entries; a new shape past that replaces the oldest (inputs whose shape
// changes every run keep rebuilding, as they would anyway).
struct ConvolutionCache {
  static constexpr std::size_t kMaxShapes = 8;
  std::vector<std::shared_ptr<PackedConvolution>> byShape;
  // Where its entries' reordered weights come from: the cache's own, or one the executor gives
  // every node (Executor::create), so that all its convolutions share copies.
  std::shared_ptr<ReorderedWeights> weights = std::make_shared<ReorderedWeights>();
  bool allowWinograd = true; // cpu_switches.h's kWinograd, set with `weights` by the executor
  bool allowBlockedDirect = true; // its kBlockedConvolutions, likewise
};

// The entry of `cache` for an input of `inputDims`: the one packed for them, else an empty one
// (the oldest dropped past kMaxShapes) that convolution() or transposedConvolution2d() fills.
std::shared_ptr<PackedConvolution>& cacheEntryFor(ConvolutionCache& cache, at::IntArrayRef inputDims);

// A 2-D or 3-D float32 convolution of x [N, C, (D,) H, W] by w [OC, C / groups, (KD,) KH, KW] plus
// an optional bias [OC], with per-dim strides, dilations and (possibly asymmetric) pads, then
// `post` (`residual` when post.addResidual). The input is read channels-last (in place when it is
// already; one copy when not) and the output is a channels-last ATen tensor (ChannelsLast3d for
// 3-D), which ATen's elementwise ops, pooling and the next convolution read as it is. `packed`
// keeps the primitive and its reordered weight; it is rebuilt when the weight (by identity), the
// input's dims, the bias's presence or the post-ops change (`cache`, the cache it belongs to: the
// reordered weight comes from its pool, made there only when no copy in that layout exists; w may
// be a stand-in of that pool's, holdOnlyReordered). Undefined where it does not take the operands,
// and for a depthwise convolution oneDNN would run on its gemm fallback (ATen's depthwise kernel
// is 4x faster there; `packed` keeps that decision for the shape). The residual is added by accumulating onto
// it: into a copy of it, or, when `residualIsScratch` (the caller's to overwrite) and it is
// channels-last already, into the residual itself, which is then the result.
// Blocked values (isBlockedActivation): x and the residual may be ones. A convolution that runs
// in the blocked layout (runsBlocked) reads them as they are when they are in the layout its
// primitive reads, and with `mayReturnBlocked` (every reader of its output takes blocked values)
// returns its output blocked, skipping the reorders around it. Any other convolution reorders a
// blocked operand to channels-last first: whether a convolution runs blocked depends on its shape
// and the CPU alone, never on its input's layout, so a cut model computes the same sums as the
// whole one.
// 3-D matters because ATen 1.13's at::convolution picks oneDNN for a 3-D convolution only above a
// size heuristic (N * C * D * H > 20480) and otherwise runs slow_conv3d: r3d_18's 128- and
// 256-channel layers ran at 31-56 GFLOP/s there, its 64-channel ones on oneDNN at about 200.
at::Tensor convolution(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                       const std::vector<std::int64_t>& strides, const std::vector<std::int64_t>& padBegin,
                       const std::vector<std::int64_t>& padEnd, const std::vector<std::int64_t>& dilations,
                       std::int64_t groups, const ConvPostOps& post, const at::Tensor& residual,
                       bool residualIsScratch, std::shared_ptr<PackedConvolution>& packed,
                       const ConvolutionCache* cache = nullptr, bool mayReturnBlocked = false);

// Whether `packed` runs Winograd's F(2x2, 3x3) (oneDNN's jit_fp32_wino_2x3) instead of the
// direct kernel. convolution() picks it for a 3x3, stride-1, undilated, ungrouped convolution of
// at least 14x14 with channels in multiples of 16 and no residual, where oneDNN has the kernel
// (AVX-512), reordering channels-last to oneDNN's blocked layout and back around it: 11-29% faster
// on ResNet-50's 3x3 convolutions, reorders included. Its sums round differently from the direct
// kernel's.
bool usesWinograd(const PackedConvolution& packed);

// Whether `packed` reads and writes oneDNN's blocked layout, reordering its channels-last input
// and output around it: Winograd's, or a direct kernel where oneDNN's channels-last one is not
// native (not brgconv: on AVX2, jit:avx2 runs nChw8c faster than nhwc) for a 2-D ungrouped
// convolution with a kernel larger than 1x1 and no residual (on an AMD EPYC, in pairs against
// channels-last: FCOS 0.91x, ResNet-50 0.98-0.99x). Results equal the channels-last kernel's up
// to rounding.
bool runsBlocked(const PackedConvolution& packed);

// The bytes of `packed`'s reordered weight (shared with others reading the same copy).
std::size_t reorderedWeightBytes(const PackedConvolution& packed);

// Whether two packed convolutions read one reordered weight buffer (ReorderedWeights' sharing).
bool shareReorderedWeight(const PackedConvolution& a, const PackedConvolution& b);

// A 2-D float32 transposed convolution (ONNX ConvTranspose) of x [N, IC, H, W] by w [IC, OC /
// groups, KH, KW] plus an optional bias [OC], then Relu when `thenRelu`: per-dim strides,
// dilations, non-negative pads at either end and output_padding (extra rows at the end; at most
// the end pad is taken off by it, else undefined). Channels-last in and out, as convolution();
// `packed` keeps the reordered weight and the primitives, rebuilt when the weight (by identity),
// the input's dims, the output's dims, the bias's presence or the Relu change. The bias and Relu
// are one in-place pass after the deconvolution: oneDNN 2.6 runs a deconvolution's own bias and
// post-ops in slow loops (bench_deconvolution: 1.12-1.30x and 1.65-8.46x the deconvolution alone,
// against 1.01-1.06x for the pass after it). ATen 1.13 runs this as im2col + GEMM
// (slow_conv_transpose2d), reordering nothing between calls.
at::Tensor transposedConvolution2d(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                                   const std::vector<std::int64_t>& strides, const std::vector<std::int64_t>& padBegin,
                                   const std::vector<std::int64_t>& padEnd, const std::vector<std::int64_t>& dilations,
                                   const std::vector<std::int64_t>& outputPadding, std::int64_t groups,
                                   bool thenRelu, std::shared_ptr<PackedConvolution>& packed,
                                   const ConvolutionCache* cache = nullptr);

} // namespace cleave::runtime::onednn
