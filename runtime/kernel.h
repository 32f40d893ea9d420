// runtime/kernel.h - the interface between the executor and the ATen implementation of each
// ONNX op. A kernel reads its operands and attributes from a KernelContext and returns its
// outputs; it throws KernelError (or lets ATen throw) on input it cannot handle, and the executor
// turns either into an error naming the op, the node and the opset.
// Complexity: kernels are resolved once per node at Executor::create (one hash lookup each);
// operand and attribute access is O(1) or a short scan of the node's attributes.
#pragma once

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/onednn.h"
#include "runtime/tensors.h"

namespace cleave::runtime {

class Executor;

// What a kernel keeps between runs of its node: a derived form of an operand (a prepacked
// weight) and the operand it was derived from, to know when it still applies; or a product's
// reordered weight with its oneDNN primitive.
struct KernelCache {
  at::Tensor source, derived;
  std::shared_ptr<onednn::PackedProduct> product;
  onednn::ConvolutionCache convolutions; // per input shape (nodes sharing a weight run at several)
  // A product's right operand when the executor holds that weight only packed (its operand is
  // then undefined; productWeight() and matmul() read it from here).
  std::shared_ptr<const onednn::PackedWeight> packedWeight;
  // A convolution's weight and bias with the BatchNormalization after it folded in (a fused
  // Conv+BatchNormalization), and the tensors they were computed from: weight, bias (or none),
  // then the normalization's scale, shift, mean and variance. For a BatchNormalization alone
  // (batchNormInference): its per-channel multiplier and shift, from its four parameters.
  std::vector<at::Tensor> foldedFrom;
  at::Tensor foldedWeight, foldedBias;
};

struct KernelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class KernelContext {
public:
  // `owner` builds subgraph executors (Loop/If bodies); null where there are none to build.
  KernelContext(const ir::Graph& graph, ir::NodeId node, std::int64_t opset, std::vector<at::Tensor> inputs,
                Executor* owner = nullptr, KernelCache* cache = nullptr, bool outputMayStayBlocked = false)
      : graph_(graph), node_(node), opset_(opset), inputs_(std::move(inputs)), owner_(owner), cache_(cache),
        outputMayStayBlocked_(outputMayStayBlocked) {}

  std::int64_t opset() const { return opset_; }
  const ir::Graph& graph() const { return graph_; }
  ir::NodeId node() const { return node_; }
  std::size_t numOutputs() const { return graph_.outputs(node_).size(); }
  // Explicit operands (implicit, outer-scope operands of subgraph ops come after them).
  std::size_t numInputs() const { return inputs_.size() - graph_.numImplicitInputs(node_); }
  bool has(std::size_t i) const { return i < numInputs() && inputs_[i].defined(); }
  const at::Tensor& input(std::size_t i) const; // throws KernelError when absent
  const std::vector<at::Tensor>& allInputs() const { return inputs_; }
  bool outputUsed(std::size_t i) const;
  // Whether the kernel may write its result into operand i's buffer: the executor handed the
  // operand over (this node is its value's last reader, and it is an op's result, not a graph
  // input or a parameter) and no other tensor or view shares its buffer. The way a convolution
  // accumulates onto its residual in place, as ONNX Runtime's planner reuses a dying buffer.
  bool mayOverwrite(std::size_t i) const;

  const ir::Attribute* attribute(std::string_view name) const { return graph_.findAttribute(node_, name); }
  std::int64_t intAttr(std::string_view name, std::int64_t fallback) const;
  float floatAttr(std::string_view name, float fallback) const;
  std::string stringAttr(std::string_view name, std::string fallback) const;
  std::vector<std::int64_t> intsAttr(std::string_view name, std::vector<std::int64_t> fallback = {}) const;
  std::vector<float> floatsAttr(std::string_view name) const;
  at::Tensor tensorAttr(std::string_view name) const; // undefined when absent

  // Whether the node's (a fused group's) first output may be returned as a blocked value: every
  // reader takes blocked operands (Layouts), so none pays a reorder for it.
  bool outputMayStayBlocked() const { return outputMayStayBlocked_; }
  // A tensor slot that lives as long as the executor, one per node (a prepacked weight); null
  // when the executor keeps none.
  KernelCache* cache() const { return cache_; }

  // Integer values of a small operand tensor (shapes, axes, pads).
  std::vector<std::int64_t> ints(std::size_t i) const;
  // The executor for a subgraph attribute ("body", "then_branch"), built once per node.
  Executor& subgraph(std::string_view attribute) const;

private:
  const ir::Graph& graph_;
  ir::NodeId node_;
  std::int64_t opset_;
  std::vector<at::Tensor> inputs_;
  Executor* owner_;
  KernelCache* cache_;
  bool outputMayStayBlocked_;
};

using Kernel = std::vector<at::Tensor> (*)(KernelContext&);

// The layouts a kernel takes its operands in. Blocked: oneDNN's blocked activation layout, which
// convolutions compute in; keeping a value blocked from one convolution to the next saves two
// reorders per op. Built with libdnnl, blocked values are onednn.h's blocked activations, which
// only convolutions and MaxPool read; without it, ATen's mkldnn tensors, which Relu, Add and
// pooling read too (atenBlockedOrDense). The executor gives blocked operands only to kernels that take them and
// turns them dense for every other reader.
enum class Layouts : std::uint8_t { Dense, DenseOrBlocked };
// The layouts of an ATen kernel that runs on ATen's mkldnn tensors: DenseOrBlocked where those are
// the blocked values (built without libdnnl), else Dense.
Layouts atenBlockedOrDense();

struct KernelEntry {
  Kernel kernel = nullptr;
  Layouts layouts = Layouts::Dense;
};

// Op type (in the default ONNX domain unless spelled "domain::Op") -> kernel.
class KernelTable {
public:
  void add(std::string opType, Kernel kernel, Layouts layouts = Layouts::Dense);
  const KernelEntry* find(std::string_view domain, std::string_view opType) const; // null when none
  std::vector<std::string> names() const; // sorted

private:
  std::vector<std::pair<std::string, KernelEntry>> entries_; // sorted by name after building
  friend const KernelTable& kernelTable();
};

const KernelTable& kernelTable();

// The op targets of `graph` (ONNX op nodes, subgraph bodies not included) that have no kernel,
// sorted and unique. O(nodes * log kernels).
std::vector<std::string> missingKernels(const ir::Graph& graph);

// Registration, one function per kernel file.
void registerElementwiseKernels(KernelTable& table);
void registerShapeKernels(KernelTable& table);
void registerNnKernels(KernelTable& table);
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
// order; throws KernelError with its message when it fails (Loop, Scan, If, SequenceMap).
std::vector<at::Tensor> runSubgraph(Executor& body, const TensorMap& feeds);
// ONNX sequences are held as ATen nested tensors (elements of one dtype and rank, shapes free); an
// empty optional is an undefined tensor. makeSequence throws KernelError on elements of different
// ranks; sequenceElements on a value that is not a sequence.
bool isSequence(const at::Tensor& t);
std::vector<at::Tensor> sequenceElements(const at::Tensor& sequence);
at::Tensor makeSequence(const std::vector<at::Tensor>& elements, at::ScalarType type);
// x[..., K] times a 2-D weight, with `weightIsNK` telling whether it is laid out [N, K] (Gemm's
// transB, torch's Linear) or [K, N]; plus an optional bias [N]. On the CPU in float32 this runs on
// oneDNN (runtime/onednn.h) with the reordered weight kept in the node's cache while the same
// weight tensor comes back (a parameter, or a weight another submodel forwards); else on ATen.
// `thenGelu`: GELU (exact erf) applied to the result, inside the product where oneDNN runs it.
at::Tensor linear(KernelContext& c, const at::Tensor& x, const at::Tensor& weight, bool weightIsNK,
                  const at::Tensor& bias, bool thenGelu = false);
// ONNX Conv of x by w (+ bias) with the node's strides, dilations, group and pads / auto_pad. A 2-D
// or 3-D float32 convolution on the CPU without autograd runs on oneDNN directly (onednn::convolution:
// channels-last, the weight reordered once and kept in the node's cache); built without libdnnl,
// in ATen's blocked layout, its output staying blocked for readers that take it. Anything else
// (other dtypes too) runs on at::convolution.
at::Tensor convolution(KernelContext& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);
// convolution() then `post` (the residual added, then the activation): one oneDNN call with
// post-ops where it takes the operands (2-D or 3-D, float32, no autograd, the residual of the output's
// shape), else convolution() followed by the same ATen ops.
// `residualIsScratch` (KernelContext::mayOverwrite): the output may be written into the residual's
// buffer instead of a copy of it.
at::Tensor fusedConvolution(KernelContext& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                            const onednn::ConvPostOps& post, const at::Tensor& residual, bool residualIsScratch = false);
// ONNX ConvTranspose of x by w (+ bias) with the node's strides, dilations, group, pads,
// output_padding and output_shape / auto_pad, then Relu when `thenRelu`. 2-D float32 without
// autograd: oneDNN's deconvolution (the weight reordered once, kept in the node's cache).
// Otherwise the unpadded transposed convolution (output_padding included) on ATen, then cropped
// (or, for negative pads, extended with zeros), then the bias.
at::Tensor transposedConvolution(KernelContext& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                                 bool thenRelu = false);
// A product with broadcast batch dims (attention's Q K^T and P V): one oneDNN call on the CPU in
// float32, else at::matmul.
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
// `thenGelu`: then GELU, as in linear().
// An undefined `b` is the node's packed weight (KernelCache::packedWeight): the product reads it
// packed, or a dense copy of it where the packed product does not take the operands.
at::Tensor matmul(KernelContext& c, const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias = at::Tensor(),
                  bool thenGelu = false);
// A product's right operand i: its tensor, or undefined when the node's cache holds it packed.
// Throws KernelError when it is neither.
at::Tensor productWeight(const KernelContext& c, std::size_t i);
// The runtime's thread count: the hardware's, unless OMP_NUM_THREADS says otherwise (some
// libtorch builds start with one thread). Idempotent.
void configureThreads();
// Indices as int64 with negative entries counted from the end of an axis of `size` elements.
at::Tensor fixNegativeIndices(const at::Tensor& indices, std::int64_t size);
std::int64_t normalizeAxis(std::int64_t axis, std::int64_t rank); // throws KernelError when out of range
at::ScalarType onnxScalarType(std::int64_t onnxDtype);              // throws KernelError when unknown
// ONNX Cast of `x` to `target`: numbers through ATen; to and from string tensors as ONNX's
// reference (numpy) writes and reads them (runtime/ops_text.cpp). Throws KernelError naming a
// string that is not a number.
at::Tensor castTo(const at::Tensor& x, ir::DType target);
// ONNX's 2-D coercion (Flatten, pre-13 Softmax): [prod(dims before axis), prod(dims from axis)].
at::Tensor flattenTo2d(const at::Tensor& x, std::int64_t axis);
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
// Layout changes (no-ops when the tensor is already in the layout). toDense takes either kind of
// blocked value (ATen's mkldnn tensors, onednn.h's blocked activations); toBlocked makes ATen's.
at::Tensor toDense(const at::Tensor& t);
at::Tensor toBlocked(const at::Tensor& t);
// Whether t is a blocked value of either kind.
bool isBlocked(const at::Tensor& t);
// Whether oneDNN computes this float32 CPU tensor in its blocked layout (ATen built with it).
bool blockable(const at::Tensor& t);
// [steps, batch] time indices that reverse each batch entry's first lengths[b] steps and keep the
// rest in place (ReverseSequence, the reverse direction of RNN / GRU / LSTM); its own inverse.
at::Tensor reversedTimeIndex(const at::Tensor& lengths, std::int64_t steps);

} // namespace cleave::runtime
