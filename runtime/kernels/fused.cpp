// runtime/kernels/fused.cpp - the kernels of fused node groups (runtime/engine/fusion.h).
#include "runtime/engine/fusion.h"

#include <numeric>
#include <optional>
#include <tuple>

#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

// activation(MatMul(x, W) + b).
template <ProductActivation activation> Outputs matmulBias(KernelContext& c) {
  return {matmul(c, c.input(0), productWeight(c, 1), c.input(2), activation)};
}

// x * 0.5 * (1 + erf(x / sqrt 2)).
Outputs decomposedGelu(KernelContext& c) { return {geluInMemoryOrder(c.input(0))}; }

// (x - mean) / sqrt(variance + eps) * gamma + beta over the last axis (the biased variance, as
// the decomposed graph computes it). Gamma and beta as at::layer_norm's affine when they are
// [N] of x's dtype; else applied after it with the graph's broadcasting.
Outputs layerNorm(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  const at::Tensor &gamma = c.input(2), &beta = c.input(3);
  const double eps = c.input(1).item<double>();
  const std::int64_t n = x.dim() > 0 ? x.size(-1) : 1;
  auto isAffine = [&](const at::Tensor& t) { return t.dim() == 1 && t.size(0) == n && t.scalar_type() == x.scalar_type(); };
  if (x.dim() > 0 && isAffine(gamma) && isAffine(beta))
    return {at::layer_norm(x, {n}, gamma, beta, eps)};
  return {at::add(at::mul(at::layer_norm(x, {n}, {}, {}, eps), gamma), beta)};
}

// Conv then its post-ops (the context is the Conv node's: its attributes).
template <ConvolutionEpilogue::Activation activation, bool residual> Outputs convWith(KernelContext& c) {
  ConvolutionEpilogue post{residual, activation};
  if constexpr (activation == ConvolutionEpilogue::Activation::Clip) {
    post.clipLow = c.input(3).item<float>();
    post.clipHigh = c.input(4).item<float>();
  }
  if constexpr (activation == ConvolutionEpilogue::Activation::HardSigmoid) {
    // Its attributes are on the group's last node, the Conv output's one reader.
    const ir::Graph& g = c.graph();
    const ir::NodeId hard = g.users(g.outputs(c.node())[0])[0];
    const ir::Attribute* alpha = g.findAttribute(hard, "alpha");
    const ir::Attribute* beta = g.findAttribute(hard, "beta");
    post.alpha = alpha ? static_cast<float>(alpha->floatValue) : 0.2f;
    post.beta = beta ? static_cast<float>(beta->floatValue) : 0.5f;
  }
  return {fusedConvolution(c, c.input(0), c.input(1), c.has(2) ? c.input(2) : at::Tensor(), post,
                           residual ? c.input(3) : at::Tensor(), residual && c.mayOverwrite(3))};
}

// The convolution weight and bias with the BatchNormalization after it folded in:
// w * s per output channel and (b - mean) * s + shift, s = scale / sqrt(variance + epsilon),
// computed in double and stored in w's dtype. `from`: w, b (or undefined), scale, shift, mean,
// variance. A ConvTranspose's weight is [IC, OC / groups, k...], so its output channels are
// axis 1 within each group. Nothing when autograd needs the nodes themselves or the operands
// do not fold (the caller then runs the nodes one by one).
std::optional<std::pair<at::Tensor, at::Tensor>> foldBatchNorm(const std::vector<at::Tensor>& from, bool transposed,
                                                               std::int64_t groups, double epsilon) {
  const at::Tensor& w = from[0];
  for (const at::Tensor& t : from)
    if (t.defined() && (t.requires_grad() || !at::isFloatingType(t.scalar_type())))
      return std::nullopt;
  if (w.dim() < 3 || groups < 1 || (transposed && w.size(0) % groups != 0))
    return std::nullopt;
  const std::int64_t channels = transposed ? w.size(1) * groups : w.size(0);
  for (std::size_t i = 1; i < from.size(); ++i)
    if (from[i].defined() && (from[i].dim() != 1 || from[i].size(0) != channels))
      return std::nullopt;
  auto asDouble = [](const at::Tensor& t) { return t.to(at::kDouble); };
  const at::Tensor s = asDouble(from[2]) / (asDouble(from[5]) + epsilon).sqrt();
  const at::Tensor b = from[1].defined() ? asDouble(from[1]) : at::zeros_like(s);
  at::Tensor bias = ((b - asDouble(from[4])) * s + asDouble(from[3])).to(w.scalar_type());
  std::vector<std::int64_t> scaleShape(static_cast<std::size_t>(w.dim()), 1);
  at::Tensor weight;
  if (transposed) { // [groups, IC / groups, OC / groups, k...] times s as [groups, 1, OC / groups, 1...]
    std::vector<std::int64_t> grouped{groups, w.size(0) / groups};
    grouped.insert(grouped.end(), w.sizes().begin() + 1, w.sizes().end());
    scaleShape.insert(scaleShape.begin(), 1);
    scaleShape[0] = groups;
    scaleShape[2] = channels / groups;
    weight = (asDouble(w).reshape(grouped) * s.reshape(scaleShape)).reshape(w.sizes());
  } else {
    scaleShape[0] = channels;
    weight = asDouble(w) * s.reshape(scaleShape);
  }
  return std::make_pair(weight.to(w.scalar_type()).contiguous(), bias.contiguous());
}

// The epsilon of the BatchNormalization that alone reads the group's first node's output (the
// context is that first node's: a Conv or a Concat).
double epsilonOfNextNormalization(const KernelContext& c) {
  const ir::Graph& g = c.graph();
  const ir::Attribute* epsilon = g.findAttribute(g.users(g.outputs(c.node())[0])[0], "epsilon");
  return epsilon ? epsilon->floatValue : 1e-5;
}

// Conv or ConvTranspose, then BatchNormalization (inference) [, then Relu]: the normalization
// folded into the convolution's weight and bias once per weight (kept in the node's cache).
// The context is the convolution's; epsilon is the normalization node's.
template <bool transposed, bool relu> Outputs convBatchNorm(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  const at::Tensor bias = c.has(2) ? c.input(2) : at::Tensor();
  std::vector<at::Tensor> from{c.input(1), bias, c.input(3), c.input(4), c.input(5), c.input(6)};
  const double epsilon = epsilonOfNextNormalization(c);
  const std::int64_t groups = c.intAttr("group", 1);
  at::Tensor weight, foldedBias;
  if (c.cache() && holdsFoldOf(*c.cache(), from)) {
    weight = c.cache()->foldedWeight;
    foldedBias = c.cache()->foldedBias;
  } else if (auto folded = foldBatchNorm(from, transposed, groups, epsilon)) {
    std::tie(weight, foldedBias) = *folded;
    if (c.cache()) {
      c.cache()->foldedFrom = from;
      c.cache()->foldedWeight = weight;
      c.cache()->foldedBias = foldedBias;
    }
  }
  using A = ConvolutionEpilogue::Activation;
  if (!weight.defined()) { // the nodes one by one
    at::Tensor y = denseFromPrivateLayout(transposed ? transposedConvolution(c, x, from[0], bias) : convolution(c, x, from[0], bias));
    y = at::batch_norm(y, from[2], from[3], from[4], from[5], false, 0.0, epsilon, false);
    return {relu ? at::relu(y) : y};
  }
  if (transposed)
    return {transposedConvolution(c, x, weight, foldedBias, relu)};
  return {fusedConvolution(c, x, weight, foldedBias, ConvolutionEpilogue{false, relu ? A::Relu : A::None}, at::Tensor())};
}

Outputs batchNormRelu(KernelContext& c) {
  return {batchNormInference(c, {c.input(0)}, {c.input(1), c.input(2), c.input(3), c.input(4)},
                             c.floatAttr("epsilon", 1e-5f), true)};
}

// Operands: the normalization's scale, shift, mean and variance, then the Concat's pieces.
Outputs concatBatchNormRelu(KernelContext& c) {
  std::vector<at::Tensor> pieces;
  for (std::size_t i = 4; i < c.numInputs(); ++i)
    pieces.push_back(c.input(i));
  const std::vector<at::Tensor> from{c.input(0), c.input(1), c.input(2), c.input(3)};
  if (const std::int64_t axis = normalizeAxis(c.intAttr("axis", 0), pieces.front().dim()); axis != 1)
    pieces = {at::cat(pieces, axis)}; // not over channels: concatenated first
  return {batchNormInference(c, pieces, from, epsilonOfNextNormalization(c), true)};
}

// Operands: the two Reshapes' shapes, then the pieces (the Concat's, or the first Reshape's data).
// One pass when the first shape splits the channels into [N, g, C/g, spatial...] and the second
// restores x's shape; otherwise the nodes' own semantics on ATen views and copies.
template <bool withConcat>
Outputs channelShuffle(KernelContext& c) {
  const ir::Graph& g = c.graph();
  std::vector<at::Tensor> pieces;
  for (std::size_t i = 2; i < c.numInputs(); ++i)
    pieces.push_back(c.input(i));
  const std::int64_t axis = withConcat ? normalizeAxis(c.intAttr("axis", 0), pieces.front().dim()) : 1;
  const ir::NodeId reshape = withConcat ? g.users(g.outputs(c.node())[0])[0] : c.node();
  const ir::NodeId transpose = g.users(g.outputs(reshape)[0])[0];
  const ir::NodeId back = g.users(g.outputs(transpose)[0])[0];
  auto allowZero = [&](ir::NodeId node) {
    const ir::Attribute* attr = g.findAttribute(node, "allowzero");
    return attr && attr->intValue != 0;
  };
  std::vector<std::int64_t> sizes = pieces.front().sizes().vec();
  if (withConcat && axis < static_cast<std::int64_t>(sizes.size()))
    for (std::size_t i = 1; i < pieces.size(); ++i)
      sizes[static_cast<std::size_t>(axis)] += pieces[i].dim() > axis ? pieces[i].size(axis) : 0;
  const std::vector<std::int64_t> split = reshapeTarget(sizes, c.ints(0), allowZero(reshape));
  if (split.size() < 3)
    throw KernelError("the Transpose swaps dims 1 and 2 of a rank " + std::to_string(split.size()) + " tensor");
  std::vector<std::int64_t> swapped = split;
  std::swap(swapped[1], swapped[2]);
  const std::vector<std::int64_t> restored = reshapeTarget(swapped, c.ints(1), allowZero(back));
  const bool shuffles = axis == 1 && sizes.size() >= 2 && split.size() == sizes.size() + 1 && split[0] == sizes[0] &&
                        split[1] * split[2] == sizes[1] &&
                        std::equal(sizes.begin() + 2, sizes.end(), split.begin() + 3) && restored == sizes;
  if (shuffles)
    if (at::Tensor y = shuffleChannels(pieces, split[1]); y.defined())
      return {y};
  at::Tensor x = withConcat ? at::cat(pieces, axis) : pieces.front();
  std::vector<std::int64_t> perm(split.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[1], perm[2]);
  return {x.reshape(split).permute(perm).reshape(restored)};
}

// Attention's mask steps (fusion.h) as one additive mask of the scores' type, or undefined where
// it has none: a Where's fill added where it fills (the score it meets then rounds to the fill).
at::Tensor additiveMask(KernelContext& c, const FusedGroup::AttentionSteps& steps, const at::TensorOptions& scores) {
  using Mask = FusedGroup::AttentionSteps::Mask;
  at::Tensor mask;
  for (std::size_t k = 0; k < steps.masks.size(); ++k) {
    const at::Tensor& operand = c.input(3 + k);
    if (steps.masks[k] == Mask::Add) {
      mask = mask.defined() ? mask + operand : operand;
      continue;
    }
    const at::Tensor fill = at::full({}, steps.fills[k], scores);
    const at::Tensor kept = mask.defined() ? mask : at::zeros({}, scores);
    mask = steps.masks[k] == Mask::FillWhereTrue ? at::where(operand, fill, kept) : at::where(operand, kept, fill);
  }
  return mask;
}

// Whether ATen's fused attention computes softmax(Q Kt scale + mask) V for these operands:
// 4-D Q [B, H, L, E], Kt [B, H, E, S], V [B, H, S, Ev] of one float type, a mask of that type
// (or none) broadcasting to [B, H, L, S], and the softmax over the last axis.
bool fusedAttentionTakes(const at::Tensor& q, const at::Tensor& kt, const at::Tensor& v, const at::Tensor& mask,
                         bool lastAxis) {
  const bool sameBatch = q.dim() == 4 && kt.dim() == 4 && v.dim() == 4 && q.size(0) == kt.size(0) &&
                         q.size(0) == v.size(0) && q.size(1) == kt.size(1) && q.size(1) == v.size(1);
  if (!lastAxis || !sameBatch || q.size(3) != kt.size(2) || kt.size(3) != v.size(2) ||
      !at::isFloatingType(q.scalar_type()) || kt.scalar_type() != q.scalar_type() ||
      v.scalar_type() != q.scalar_type() || q.numel() == 0 || kt.numel() == 0)
    return false;
  if (!mask.defined())
    return true;
  if (mask.scalar_type() != q.scalar_type() || mask.dim() > 4)
    return false;
  const std::int64_t want[] = {q.size(0), q.size(1), q.size(2), kt.size(3)};
  for (std::int64_t d = 0; d < mask.dim(); ++d) {
    const std::int64_t size = mask.size(mask.dim() - 1 - d), target = want[3 - d];
    if (size != 1 && size != target)
      return false;
  }
  return true;
}

// MatMul(Q, Kt) -> scale and masks -> Softmax -> [Dropout] -> MatMul(., V) (fusion.h): ATen's
// scaled_dot_product_attention where it takes the operands and the device's wing has no faster
// way (FastPaths::attentionAsSteps), else the steps one after another. ATen's call makes a row
// no key is left to zeros, what the IsNaN step (zeroNanRows) makes of it.
Outputs attention(KernelContext& c) {
  const FusedGroup::AttentionSteps& steps = c.group()->attention;
  const at::Tensor &q = c.input(0), &kt = c.input(1), &v = c.input(2);
  const at::Tensor mask = additiveMask(c, steps, q.options());
  const std::int64_t rank = std::max(q.dim(), kt.dim());
  const FastPaths* fast = fastPathsFor(q.device());
  if (!(fast && fast->attentionAsSteps()) &&
      fusedAttentionTakes(q, kt, v, mask, softmaxIsOverLastAxis(steps.softmaxAxis, c.opset(), rank)))
    return {at::scaled_dot_product_attention(q, kt.transpose(-2, -1), v,
                                             mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt, 0.0,
                                             false, steps.scale)};
  at::Tensor scores = batchedMatmul(q, kt);
  if (steps.scale != 1.0)
    scores = scores * steps.scale;
  if (mask.defined())
    scores = scores + mask;
  at::Tensor probabilities = onnxSoftmax(scores, steps.softmaxAxis, c.opset(), false, true);
  if (steps.zeroNanRows)
    probabilities = probabilities.masked_fill(probabilities.isnan(), 0.0);
  return {batchedMatmul(probabilities, v)};
}
} // namespace

bool holdsFoldOf(const KernelCache& cache, const std::vector<at::Tensor>& from) {
  if (cache.foldedFrom.size() != from.size())
    return false;
  for (std::size_t i = 0; i < from.size(); ++i)
    if (cache.foldedFrom[i].defined() != from[i].defined() ||
        (from[i].defined() && !cache.foldedFrom[i].is_same(from[i])))
      return false;
  return true;
}

namespace {
Kernel fusedKernelFunction(FusedGroup::Kind kind) {
  switch (kind) {
  case FusedGroup::Kind::MatMulBias: return matmulBias<ProductActivation::None>;
  case FusedGroup::Kind::MatMulBiasGelu: return matmulBias<ProductActivation::Gelu>;
  case FusedGroup::Kind::MatMulBiasGeluTanh: return matmulBias<ProductActivation::GeluTanh>;
  case FusedGroup::Kind::MatMulBiasRelu: return matmulBias<ProductActivation::Relu>;
  case FusedGroup::Kind::Gelu: return decomposedGelu;
  case FusedGroup::Kind::ConvRelu: return convWith<ConvolutionEpilogue::Activation::Relu, false>;
  case FusedGroup::Kind::ConvClip: return convWith<ConvolutionEpilogue::Activation::Clip, false>;
  case FusedGroup::Kind::ConvHardSwish: return convWith<ConvolutionEpilogue::Activation::HardSwish, false>;
  case FusedGroup::Kind::ConvHardSigmoid: return convWith<ConvolutionEpilogue::Activation::HardSigmoid, false>;
  case FusedGroup::Kind::ConvSilu: return convWith<ConvolutionEpilogue::Activation::Swish, false>;
  case FusedGroup::Kind::ConvAdd: return convWith<ConvolutionEpilogue::Activation::None, true>;
  case FusedGroup::Kind::ConvAddRelu: return convWith<ConvolutionEpilogue::Activation::Relu, true>;
  case FusedGroup::Kind::Attention: return attention;
  case FusedGroup::Kind::ConvBatchNorm: return convBatchNorm<false, false>;
  case FusedGroup::Kind::ConvBatchNormRelu: return convBatchNorm<false, true>;
  case FusedGroup::Kind::ConvTransposeBatchNorm: return convBatchNorm<true, false>;
  case FusedGroup::Kind::ConvTransposeBatchNormRelu: return convBatchNorm<true, true>;
  case FusedGroup::Kind::LayerNorm: return layerNorm;
  case FusedGroup::Kind::BatchNormRelu: return batchNormRelu;
  case FusedGroup::Kind::ConcatBatchNormRelu: return concatBatchNormRelu;
  case FusedGroup::Kind::ChannelShuffle: return channelShuffle<false>;
  case FusedGroup::Kind::ConcatChannelShuffle: return channelShuffle<true>;
  }
  return nullptr;
}

// The convolution kinds read x and the residual through fusedConvolution, which takes blocked
// values; the transposed ones do not.
Layouts fusedLayouts(FusedGroup::Kind kind) {
  switch (kind) {
  case FusedGroup::Kind::ConvRelu:
  case FusedGroup::Kind::ConvClip:
  case FusedGroup::Kind::ConvHardSwish:
  case FusedGroup::Kind::ConvHardSigmoid:
  case FusedGroup::Kind::ConvSilu:
  case FusedGroup::Kind::ConvAdd:
  case FusedGroup::Kind::ConvAddRelu:
  case FusedGroup::Kind::ConvBatchNorm:
  case FusedGroup::Kind::ConvBatchNormRelu: return Layouts::DenseOrPrivate;
  default: return Layouts::Dense;
  }
}

// The operands read as numbers (kernel.h, OperandMemory): the shuffles' two Reshape shapes,
// LayerNorm's epsilon, a fused Clip's bounds.
OperandMemory fusedOperandMemory(FusedGroup::Kind kind) {
  switch (kind) {
  case FusedGroup::Kind::ChannelShuffle:
  case FusedGroup::Kind::ConcatChannelShuffle: return hostOperands({0, 1});
  case FusedGroup::Kind::LayerNorm: return hostOperands({1});
  case FusedGroup::Kind::ConvClip: return hostOperands({3, 4});
  default: return {};
  }
}
} // namespace

KernelEntry fusedKernel(FusedGroup::Kind kind) {
  return {fusedKernelFunction(kind), fusedLayouts(kind), fusedOperandMemory(kind)};
}

const char* fusedName(FusedGroup::Kind kind) {
  switch (kind) {
  case FusedGroup::Kind::MatMulBias: return "MatMul+Add";
  case FusedGroup::Kind::MatMulBiasGelu: return "MatMul+Add+Gelu";
  case FusedGroup::Kind::MatMulBiasGeluTanh: return "MatMul+Add+Gelu(tanh)";
  case FusedGroup::Kind::MatMulBiasRelu: return "MatMul+Add+Relu";
  case FusedGroup::Kind::Gelu: return "Gelu(Div,Erf,Add,Mul,Mul)";
  case FusedGroup::Kind::ConvRelu: return "Conv+Relu";
  case FusedGroup::Kind::ConvClip: return "Conv+Clip";
  case FusedGroup::Kind::ConvHardSwish: return "Conv+HardSwish";
  case FusedGroup::Kind::ConvHardSigmoid: return "Conv+HardSigmoid";
  case FusedGroup::Kind::ConvSilu: return "Conv+Sigmoid+Mul";
  case FusedGroup::Kind::ConvAdd: return "Conv+Add";
  case FusedGroup::Kind::ConvAddRelu: return "Conv+Add+Relu";
  case FusedGroup::Kind::ConvBatchNorm: return "Conv+BatchNormalization";
  case FusedGroup::Kind::ConvBatchNormRelu: return "Conv+BatchNormalization+Relu";
  case FusedGroup::Kind::ConvTransposeBatchNorm: return "ConvTranspose+BatchNormalization";
  case FusedGroup::Kind::ConvTransposeBatchNormRelu: return "ConvTranspose+BatchNormalization+Relu";
  case FusedGroup::Kind::LayerNorm: return "LayerNorm(ReduceMean,Sub,Pow,ReduceMean,Add,Sqrt,Div,Mul,Add)";
  case FusedGroup::Kind::BatchNormRelu: return "BatchNormalization+Relu";
  case FusedGroup::Kind::ConcatBatchNormRelu: return "Concat+BatchNormalization+Relu";
  case FusedGroup::Kind::ChannelShuffle: return "Reshape+Transpose+Reshape";
  case FusedGroup::Kind::ConcatChannelShuffle: return "Concat+Reshape+Transpose+Reshape";
  case FusedGroup::Kind::Attention: return "Attention(MatMul,Softmax,MatMul)";
  }
  return "?";
}

} // namespace cleave::runtime
