// runtime/engine/fusion.h - which groups of ONNX nodes the executor runs as one kernel call.
//
// Patterns (PyTorch's ONNX exports of Linear and of the exact GELU):
//   MatMulBias  MatMul(x, W) -> Add(., b)          one oneDNN product with the bias (kernel.h linear)
//   Gelu        Div(x, sqrt 2) -> Erf -> Add(., 1) -> Mul(x, .) -> Mul(., 0.5)     one at::gelu
//   MatMulBiasGelu  MatMulBias whose output only that Gelu reads (a transformer's first FFN
//               layer): one oneDNN product with the bias and GELU as its post-op
//   MatMulBiasGeluTanh  MatMulBias whose output only GELU's tanh form reads, as exported
//               (GPT-2's): Pow(x, 3) -> Mul(., 0.044715) -> Add(x, .) -> Mul(., sqrt(2/pi)) ->
//               Tanh -> Add(., 1), and Mul(x, 0.5) -> Mul(that, .), or Mul(x, .) -> Mul(., 0.5):
//               the product with gelu_tanh as its post-op
//   MatMulBiasRelu  MatMulBias whose output only a Relu reads: the product with Relu as its post-op
//   ConvRelu, ConvClip, ConvHardSwish, ConvHardSigmoid
//               Conv -> Relu | Clip(., lo, hi) | HardSwish | HardSigmoid
//   ConvSilu    Conv -> Sigmoid -> Mul(conv, sigmoid)   (SiLU / swish)
//   ConvHardSwish also from Conv -> HardSigmoid(alpha 1/6, beta 0.5) -> Mul(conv, that): HardSwish
//               as exported before opset 14
//   ConvAdd, ConvAddRelu                Conv -> Add(., residual) [-> Relu]
//               one oneDNN convolution with post-ops (kernel.h fusedConvolution); Clip's bounds
//               must be single-element constants
//   ConvBatchNorm, ConvBatchNormRelu, ConvTransposeBatchNorm, ConvTransposeBatchNormRelu
//               Conv | ConvTranspose -> BatchNormalization (inference: one output, training_mode
//               0; its scale, shift, mean and variance are parameters) [-> Relu]: the
//               normalization folded into the convolution's weight and bias once (w * s per
//               output channel, (b - mean) * s + shift, s = scale / sqrt(variance + epsilon));
//               a Conv's Relu is its post-op, a ConvTranspose's is applied with its bias after it
//               (onednn::transposedConvolution2d)
//   LayerNorm   ReduceMean(x) -> Sub(x, .) -> Pow(., 2) -> ReduceMean -> Add(., eps) -> Sqrt,
//               Div(Sub's output, Sqrt's) -> Mul(., gamma) -> Add(., beta), both means over the
//               last axis: PyTorch's export of LayerNorm before opset 17; one at::layer_norm
//   BatchNormRelu  BatchNormalization (inference, one output) -> Relu, the normalization not after
//               a convolution (DenseNet's pre-activation): one pass x * m + s per channel, Relu in
//               place (kernel.h batchNormInference)
//   ConcatBatchNormRelu  Concat -> BatchNormalization (inference, of the concatenation) -> Relu
//               (every DenseNet layer's input): one pass from the pieces to the normalized output,
//               the concatenation never made (kernel.h scaleShiftConcatenation)
//   ChannelShuffle, ConcatChannelShuffle  [Concat ->] Reshape -> Transpose (perm swapping dims 1
//               and 2, the rest in place) -> Reshape (ShuffleNet's channel shuffle, after the
//               Concat of its two branches): one pass from the pieces (kernel.h shuffleChannels)
//               when the shapes turn out to be [N, g, C/g, spatial...] and back; otherwise the
//               nodes' own reshapes and permutation
//   Attention   MatMul(Q, Kt) -> [Mul | Div by a scalar constant]* -> [Add(., mask) |
//               Where(cond, fill, .) | Where(cond, ., fill)]* -> Softmax (last axis) ->
//               [Where(IsNaN(.), 0, .): the exporters' boolean masks] ->
//               [Dropout (inference: no training_mode operand)] -> MatMul(., V): how PyTorch's
//               exporters (both) spell scaled_dot_product_attention, nn.MultiheadAttention and
//               hand-written attention (BERT, GPT-2, LLaMA, ViT blocks). One call of ATen's
//               scaled_dot_product_attention where Q, K and V are 4-D of one float type, the
//               softmax is over the last axis and the device's wing has no faster way
//               (FastPaths::attentionAsSteps: oneDNN's products on the CPU), else the same steps
//               one after another (runtime/kernels/fused.cpp). The scale constants multiply into
//               one scale; the masks add into one additive mask (a Where's fill must be -1e30 or
//               below: adding it to a score gives the fill, as Where does); no scale after a
//               mask (it would scale the mask). A row no key is left to (every score -inf) is
//               zeros through the fused call, as the IsNaN step makes it; through the steps
//               without that step it is NaN, as the nodes make it.
// Add and Mul operands may come in either order. A group is fused only when each of its inner
// values is read by the next node of the group alone (LayerNorm's centered x: by its Pow and Div;
// not by other nodes, not a graph output);
// the constants (sqrt 2, 1, 0.5) must be single-element Constant nodes or parameters.
// A group runs at its last node (every operand exists by then) and makes that node's output;
// the inner values are never made. Its kernel reads attributes from the group's first node. Observed runs (dumps, previews) do not fuse: they need
// every value.
// Guarantees: a group computes what its nodes compute, up to float rounding (GELU's formula is
// evaluated in one pass; a bias that is not 1-D [N] is added after the product instead).
// Complexity: O(N + E) to plan; each pattern is matched from its first node in O(1) steps.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/ids.h"
#include "ir/graph.h"
#include "runtime/engine/kernel.h"

namespace cleave::runtime {

struct FusedGroup {
  enum class Kind : std::uint8_t {
    MatMulBias, MatMulBiasGelu, MatMulBiasGeluTanh, MatMulBiasRelu, Gelu, ConvRelu, ConvClip, ConvHardSwish, ConvHardSigmoid, ConvSilu, ConvAdd, ConvAddRelu, ConvBatchNorm,
    ConvBatchNormRelu, ConvTransposeBatchNorm, ConvTransposeBatchNormRelu, LayerNorm, BatchNormRelu, ConcatBatchNormRelu,
    ChannelShuffle, ConcatChannelShuffle, Attention
  };
  Kind kind;
  std::vector<ir::NodeId> nodes;     // in graph order; the last one makes the group's output
  // MatMulBias, MatMulBias{Gelu,GeluTanh,Relu}: x, W, b; Gelu: x; Conv*: x, W, b (or none), then the residual (ConvAdd*),
  // Clip's lo and hi (ConvClip) or the normalization's scale, shift, mean and variance (*BatchNorm*);
  // LayerNorm: x, eps, gamma, beta; BatchNormRelu: the normalization's x, scale, shift, mean, variance;
  // ConcatBatchNormRelu: the normalization's scale, shift, mean, variance, then the Concat's pieces;
  // ChannelShuffle, ConcatChannelShuffle: both Reshapes' shapes, then the Concat's pieces (or the
  // first Reshape's data). Attention: Q, Kt, V, then each mask step's operand (Add's mask, Where's
  // condition).
  std::vector<ir::ValueId> operands;
  // Attention's steps between its two products, read by its kernel (KernelContext::group).
  struct AttentionSteps {
    double scale = 1.0; // the Mul and Div constants after Q Kt, multiplied together
    enum class Mask : std::uint8_t { Add, FillWhereTrue, FillWhereFalse };
    std::vector<Mask> masks;  // in order, each reading operands[3 + k]
    std::vector<double> fills; // per mask step: a Where's fill (0 for Add)
    std::optional<std::int64_t> softmaxAxis; // the Softmax's axis attribute, when it has one
    bool zeroNanRows = false; // Where(IsNaN(p), 0, p) after it: a row no key is left to is zeros
  } attention;
};

struct FusionPlan {
  std::vector<FusedGroup> groups;
  IdVector<ir::NodeId, std::int32_t> groupOf; // index into groups; -1 for nodes run alone
};

// `attention`: whether attention groups form (Optimizations::fusedAttention).
FusionPlan planFusions(const ir::Graph& graph, bool attention = true);

// The kernel running a group (runtime/kernels/fused.cpp), with the layouts it takes its operands in
// (blocked values for the convolution kinds), and its name in profiles ("MatMul+Add").
KernelEntry fusedKernel(FusedGroup::Kind kind);
const char* fusedName(FusedGroup::Kind kind);

} // namespace cleave::runtime
