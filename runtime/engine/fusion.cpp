#include "runtime/engine/fusion.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>

#include "runtime/engine/tensors.h"

namespace cleave::runtime {
using ir::NodeId;
using ir::ValueId;

namespace {
bool isOp(const ir::Graph& g, NodeId node, std::string_view opType) {
  return g.kind(node) == ir::NodeKind::Op && (g.opDomain(node).empty() || g.opDomain(node) == "ai.onnx") &&
         g.opType(node) == opType;
}

// The node that alone reads `value` (which is no graph output), if it is an `opType` op with
// two operands.
std::optional<NodeId> soleReader(const ir::Graph& g, ValueId value, std::string_view opType) {
  auto users = g.users(value);
  if (users.size() != 1 || !isOp(g, users[0], opType) || g.inputs(users[0]).size() != 2 ||
      g.outputs(users[0]).size() != 1)
    return std::nullopt;
  return users[0];
}

// The operand of a binary node other than `value` (null when both are `value`).
ValueId otherOperand(const ir::Graph& g, NodeId node, ValueId value) {
  auto inputs = g.inputs(node);
  if (inputs[0] == value)
    return inputs[1] == value ? ir::kNoValue : inputs[1];
  return inputs[1] == value ? inputs[0] : ir::kNoValue;
}

// The value of a single-element constant (a Constant node's tensor or a parameter).
std::optional<double> scalarConstant(const ir::Graph& g, ValueId value) {
  if (value == ir::kNoValue)
    return std::nullopt;
  NodeId producer = g.producer(value);
  Expected<at::Tensor> tensor = Error(ErrorCode::NotFound);
  if (isOp(g, producer, "Constant")) {
    const ir::Attribute* attr = g.findAttribute(producer, "value");
    if (!attr || attr->kind != ir::AttrKind::Tensor)
      return std::nullopt;
    tensor = tensorFromProto(attr->text, "constant");
  } else if (g.kind(producer) == ir::NodeKind::Parameter && !g.parameters(producer).empty()) {
    tensor = loadParameter(g, g.parameters(producer)[0]);
  }
  if (!tensor || tensor->numel() != 1 || !at::isFloatingType(tensor->scalar_type()))
    return std::nullopt;
  return tensor->item<double>();
}

bool near(std::optional<double> value, double expected) {
  return value && std::abs(*value - expected) <= 1e-6 * std::abs(expected);
}

std::optional<FusedGroup> matchMatMulBias(const ir::Graph& g, NodeId matmul) {
  if (!isOp(g, matmul, "MatMul") || g.inputs(matmul).size() != 2 || g.outputs(matmul).size() != 1)
    return std::nullopt;
  ValueId product = g.outputs(matmul)[0];
  std::optional<NodeId> add = soleReader(g, product, "Add");
  if (!add)
    return std::nullopt;
  ValueId bias = otherOperand(g, *add, product);
  if (bias == ir::kNoValue)
    return std::nullopt;
  return FusedGroup{FusedGroup::Kind::MatMulBias, {matmul, *add}, {g.inputs(matmul)[0], g.inputs(matmul)[1], bias}};
}

std::optional<FusedGroup> matchGelu(const ir::Graph& g, NodeId div) {
  if (!isOp(g, div, "Div") || g.inputs(div).size() != 2 || g.outputs(div).size() != 1 ||
      !near(scalarConstant(g, g.inputs(div)[1]), std::sqrt(2.0)))
    return std::nullopt;
  ValueId x = g.inputs(div)[0];
  auto users = g.users(g.outputs(div)[0]);
  if (users.size() != 1 || !isOp(g, users[0], "Erf") || g.outputs(users[0]).size() != 1)
    return std::nullopt;
  NodeId erf = users[0];
  ValueId erfOut = g.outputs(erf)[0];
  std::optional<NodeId> plusOne = soleReader(g, erfOut, "Add");
  if (!plusOne || !near(scalarConstant(g, otherOperand(g, *plusOne, erfOut)), 1.0))
    return std::nullopt;
  ValueId onePlus = g.outputs(*plusOne)[0];
  std::optional<NodeId> timesX = soleReader(g, onePlus, "Mul");
  if (!timesX || otherOperand(g, *timesX, onePlus) != x)
    return std::nullopt;
  ValueId scaled = g.outputs(*timesX)[0];
  std::optional<NodeId> half = soleReader(g, scaled, "Mul");
  if (!half || !near(scalarConstant(g, otherOperand(g, *half, scaled)), 0.5))
    return std::nullopt;
  return FusedGroup{FusedGroup::Kind::Gelu, {div, erf, *plusOne, *timesX, *half}, {x}};
}
// MatMulBias then the Gelu of its output, when that Gelu's nodes are the output's only readers.
std::optional<FusedGroup> matchMatMulBiasGelu(const ir::Graph& g, NodeId matmul) {
  std::optional<FusedGroup> product = matchMatMulBias(g, matmul);
  if (!product)
    return std::nullopt;
  ValueId biased = g.outputs(product->nodes.back())[0];
  auto users = g.users(biased);
  auto div = std::find_if(users.begin(), users.end(), [&](NodeId user) { return isOp(g, user, "Div"); });
  if (div == users.end())
    return std::nullopt;
  std::optional<FusedGroup> gelu = matchGelu(g, *div);
  if (!gelu || gelu->operands[0] != biased)
    return std::nullopt;
  for (NodeId user : users) // Div and Mul(x, .); an output node or any other reader forbids it
    if (std::find(gelu->nodes.begin(), gelu->nodes.end(), user) == gelu->nodes.end())
      return std::nullopt;
  product->kind = FusedGroup::Kind::MatMulBiasGelu;
  product->nodes.insert(product->nodes.end(), gelu->nodes.begin(), gelu->nodes.end());
  return product;
}

// The node that alone reads `value`, if it is an `opType` op with `inputs` operands and one output.
std::optional<NodeId> soleReaderOf(const ir::Graph& g, ValueId value, std::string_view opType, std::size_t inputs) {
  auto users = g.users(value);
  if (users.size() != 1 || !isOp(g, users[0], opType) || g.inputs(users[0]).size() != inputs ||
      g.outputs(users[0]).size() != 1)
    return std::nullopt;
  return users[0];
}

// The reader of `value` among `users` that is an `opType` op with two operands, one of them a
// single-element constant near `constant`; none otherwise.
std::optional<NodeId> readerByConstant(const ir::Graph& g, ValueId value, std::span<const NodeId> users,
                                       std::string_view opType, double constant) {
  for (NodeId user : users)
    if (isOp(g, user, opType) && g.inputs(user).size() == 2 && g.outputs(user).size() == 1 &&
        near(scalarConstant(g, otherOperand(g, user, value)), constant))
      return user;
  return std::nullopt;
}

// GELU's tanh form of `x` (fusion.h, MatMulBiasGeluTanh): its nodes in graph order, when they are
// x's only readers and each inner value is read inside the pattern alone.
std::optional<std::vector<NodeId>> matchGeluTanh(const ir::Graph& g, ValueId x) {
  auto users = g.users(x);
  std::optional<NodeId> cube = readerByConstant(g, x, users, "Pow", 3.0);
  if (!cube || g.inputs(*cube)[0] != x)
    return std::nullopt;
  std::optional<NodeId> cubed = soleReader(g, g.outputs(*cube)[0], "Mul");
  if (!cubed || !near(scalarConstant(g, otherOperand(g, *cubed, g.outputs(*cube)[0])), 0.044715))
    return std::nullopt;
  std::optional<NodeId> inner = soleReader(g, g.outputs(*cubed)[0], "Add");
  if (!inner || otherOperand(g, *inner, g.outputs(*cubed)[0]) != x)
    return std::nullopt;
  std::optional<NodeId> scaled = soleReader(g, g.outputs(*inner)[0], "Mul");
  if (!scaled || !near(scalarConstant(g, otherOperand(g, *scaled, g.outputs(*inner)[0])), std::sqrt(2.0 / 3.14159265358979323846)))
    return std::nullopt;
  std::optional<NodeId> tanh = soleReaderOf(g, g.outputs(*scaled)[0], "Tanh", 1);
  if (!tanh)
    return std::nullopt;
  std::optional<NodeId> plusOne = soleReader(g, g.outputs(*tanh)[0], "Add");
  if (!plusOne || !near(scalarConstant(g, otherOperand(g, *plusOne, g.outputs(*tanh)[0])), 1.0))
    return std::nullopt;
  const ValueId onePlus = g.outputs(*plusOne)[0];
  std::optional<NodeId> last = soleReader(g, onePlus, "Mul");
  if (!last)
    return std::nullopt;
  std::vector<NodeId> nodes{*cube, *cubed, *inner, *scaled, *tanh, *plusOne};
  const ValueId other = otherOperand(g, *last, onePlus);
  if (other == x) { // Mul(x, 1 + tanh) -> Mul(., 0.5)
    std::optional<NodeId> half = soleReader(g, g.outputs(*last)[0], "Mul");
    if (!half || !near(scalarConstant(g, otherOperand(g, *half, g.outputs(*last)[0])), 0.5) || users.size() != 3)
      return std::nullopt;
    nodes.insert(nodes.end(), {*last, *half});
  } else { // Mul(x, 0.5) -> Mul(that, 1 + tanh)
    std::optional<NodeId> half = readerByConstant(g, x, users, "Mul", 0.5);
    if (!half || g.outputs(*half)[0] != other || g.users(other).size() != 1 || users.size() != 3)
      return std::nullopt;
    nodes.insert(nodes.end(), {*half, *last});
  }
  std::sort(nodes.begin(), nodes.end(), [](NodeId a, NodeId b) { return index(a) < index(b); });
  return nodes;
}

// MatMulBias then an activation that alone reads its output: GELU's tanh form or Relu.
std::optional<FusedGroup> matchMatMulBiasActivation(const ir::Graph& g, NodeId matmul) {
  std::optional<FusedGroup> product = matchMatMulBias(g, matmul);
  if (!product)
    return std::nullopt;
  const ValueId biased = g.outputs(product->nodes.back())[0];
  auto users = g.users(biased);
  if (users.size() == 1 && isOp(g, users[0], "Relu") && g.inputs(users[0]).size() == 1 &&
      g.outputs(users[0]).size() == 1) {
    product->kind = FusedGroup::Kind::MatMulBiasRelu;
    product->nodes.push_back(users[0]);
    return product;
  }
  std::optional<std::vector<NodeId>> gelu = matchGeluTanh(g, biased);
  if (!gelu)
    return std::nullopt;
  product->kind = FusedGroup::Kind::MatMulBiasGeluTanh;
  product->nodes.insert(product->nodes.end(), gelu->begin(), gelu->end());
  return product;
}

// gate(x) and Mul(x, that) as the only readers of x, the gate a one-operand op that `isGate`
// accepts: the two nodes, in graph order.
template <class IsGate>
std::optional<std::pair<NodeId, NodeId>> matchSelfGated(const ir::Graph& g, ValueId x, IsGate isGate) {
  auto users = g.users(x);
  if (users.size() != 2)
    return std::nullopt;
  for (int first = 0; first < 2; ++first) {
    NodeId gate = users[first], mul = users[1 - first];
    if (!isGate(gate) || g.inputs(gate).size() != 1 || g.outputs(gate).size() != 1)
      continue;
    std::optional<NodeId> reader = soleReader(g, g.outputs(gate)[0], "Mul");
    if (reader && *reader == mul && otherOperand(g, mul, g.outputs(gate)[0]) == x)
      return std::make_pair(gate, mul);
  }
  return std::nullopt;
}

// Sigmoid(x) and Mul(x, that) (SiLU).
std::optional<std::pair<NodeId, NodeId>> matchSilu(const ir::Graph& g, ValueId x) {
  return matchSelfGated(g, x, [&g](NodeId node) { return isOp(g, node, "Sigmoid"); });
}

// HardSigmoid(x) with alpha 1/6 and beta 0.5, and Mul(x, that): HardSwish as PyTorch exports it
// before opset 14, which has no HardSwish op (MobileNetV3 and DeepLabV3 at opsets 11-13).
std::optional<std::pair<NodeId, NodeId>> matchDecomposedHardSwish(const ir::Graph& g, ValueId x) {
  return matchSelfGated(g, x, [&g](NodeId node) {
    const ir::Attribute* alpha = isOp(g, node, "HardSigmoid") ? g.findAttribute(node, "alpha") : nullptr;
    const ir::Attribute* beta = alpha ? g.findAttribute(node, "beta") : nullptr;
    return alpha && near(alpha->floatValue, 1.0 / 6.0) && (!beta || near(beta->floatValue, 0.5));
  });
}

// A ReduceMean over x's last axis only, keeping dims (its axes as an attribute: opsets 11-17).
bool reducesLastAxis(const ir::Graph& g, NodeId node, ValueId x) {
  if (!isOp(g, node, "ReduceMean") || g.inputs(node).size() != 1 || g.outputs(node).size() != 1 ||
      g.inputs(node)[0] != x)
    return false;
  const ir::Attribute* keep = g.findAttribute(node, "keepdims");
  const ir::Attribute* axes = g.findAttribute(node, "axes");
  if ((keep && keep->intValue != 1) || !axes || axes->ints.size() != 1)
    return false;
  const std::int64_t axis = axes->ints[0];
  return axis == -1 || (g.rankKnown(x) && axis == static_cast<std::int64_t>(g.dims(x).size()) - 1);
}

// PyTorch's export of LayerNorm before opset 17, over the last axis:
//   m = ReduceMean(x); d = Sub(x, m); v = ReduceMean(Pow(d, 2)); s = Sqrt(Add(v, eps));
//   y = Add(Mul(Div(d, s), gamma), beta)
// matched from the first ReduceMean. d is read by Pow and Div, both in the group.
std::optional<FusedGroup> matchLayerNorm(const ir::Graph& g, NodeId mean) {
  if (g.kind(mean) != ir::NodeKind::Op || g.inputs(mean).size() != 1)
    return std::nullopt;
  const ValueId x = g.inputs(mean)[0];
  if (!reducesLastAxis(g, mean, x))
    return std::nullopt;
  std::optional<NodeId> sub = soleReader(g, g.outputs(mean)[0], "Sub");
  if (!sub || g.inputs(*sub)[0] != x || g.inputs(*sub)[1] != g.outputs(mean)[0])
    return std::nullopt;
  const ValueId centered = g.outputs(*sub)[0];
  auto readers = g.users(centered);
  if (readers.size() != 2)
    return std::nullopt;
  NodeId pow = readers[0], div = readers[1];
  if (!isOp(g, pow, "Pow"))
    std::swap(pow, div);
  if (!isOp(g, pow, "Pow") || g.inputs(pow).size() != 2 || g.inputs(pow)[0] != centered ||
      !near(scalarConstant(g, g.inputs(pow)[1]), 2.0) || !isOp(g, div, "Div") || g.inputs(div).size() != 2 ||
      g.inputs(div)[0] != centered || g.inputs(div)[1] == centered)
    return std::nullopt;
  std::optional<NodeId> variance = soleReaderOf(g, g.outputs(pow)[0], "ReduceMean", 1);
  if (!variance || !reducesLastAxis(g, *variance, g.outputs(pow)[0]))
    return std::nullopt;
  const ValueId varianceOut = g.outputs(*variance)[0];
  std::optional<NodeId> addEps = soleReader(g, varianceOut, "Add");
  const ValueId eps = addEps ? otherOperand(g, *addEps, varianceOut) : ir::kNoValue;
  if (!addEps || !scalarConstant(g, eps))
    return std::nullopt;
  std::optional<NodeId> sqrt = soleReaderOf(g, g.outputs(*addEps)[0], "Sqrt", 1);
  if (!sqrt || g.users(g.outputs(*sqrt)[0]).size() != 1 || g.inputs(div)[1] != g.outputs(*sqrt)[0])
    return std::nullopt;
  std::optional<NodeId> scale = soleReader(g, g.outputs(div)[0], "Mul");
  const ValueId gamma = scale ? otherOperand(g, *scale, g.outputs(div)[0]) : ir::kNoValue;
  std::optional<NodeId> shift = gamma != ir::kNoValue ? soleReader(g, g.outputs(*scale)[0], "Add") : std::nullopt;
  const ValueId beta = shift ? otherOperand(g, *shift, g.outputs(*scale)[0]) : ir::kNoValue;
  if (beta == ir::kNoValue)
    return std::nullopt;
  std::vector<NodeId> nodes{mean, *sub, pow, *variance, *addEps, *sqrt, div, *scale, *shift};
  std::sort(nodes.begin(), nodes.end());
  if (nodes.back() != *shift)
    return std::nullopt; // the group makes its last node's output
  return FusedGroup{FusedGroup::Kind::LayerNorm, std::move(nodes), {x, eps, gamma, beta}};
}

std::optional<FusedGroup> matchConv(const ir::Graph& g, NodeId conv) {
  using K = FusedGroup::Kind;
  if (!isOp(g, conv, "Conv") || g.inputs(conv).size() < 2 || g.outputs(conv).size() != 1)
    return std::nullopt;
  ValueId out = g.outputs(conv)[0];
  std::vector<ValueId> operands{g.inputs(conv)[0], g.inputs(conv)[1],
                                g.inputs(conv).size() > 2 ? g.inputs(conv)[2] : ir::kNoValue};
  if (auto relu = soleReaderOf(g, out, "Relu", 1))
    return FusedGroup{K::ConvRelu, {conv, *relu}, operands};
  if (auto swish = soleReaderOf(g, out, "HardSwish", 1))
    return FusedGroup{K::ConvHardSwish, {conv, *swish}, operands};
  if (auto hard = soleReaderOf(g, out, "HardSigmoid", 1))
    return FusedGroup{K::ConvHardSigmoid, {conv, *hard}, operands};
  if (auto silu = matchSilu(g, out))
    return FusedGroup{K::ConvSilu, {conv, silu->first, silu->second}, operands};
  if (auto swish = matchDecomposedHardSwish(g, out))
    return FusedGroup{K::ConvHardSwish, {conv, swish->first, swish->second}, operands};
  if (auto clip = soleReaderOf(g, out, "Clip", 3)) {
    ValueId low = g.inputs(*clip)[1], high = g.inputs(*clip)[2];
    if (!scalarConstant(g, low) || !scalarConstant(g, high))
      return std::nullopt;
    operands.insert(operands.end(), {low, high});
    return FusedGroup{K::ConvClip, {conv, *clip}, operands};
  }
  if (auto add = soleReader(g, out, "Add")) {
    ValueId residual = otherOperand(g, *add, out);
    if (residual == ir::kNoValue)
      return std::nullopt;
    operands.push_back(residual);
    if (auto relu = soleReaderOf(g, g.outputs(*add)[0], "Relu", 1))
      return FusedGroup{K::ConvAddRelu, {conv, *add, *relu}, operands};
    return FusedGroup{K::ConvAdd, {conv, *add}, operands};
  }
  return std::nullopt;
}

bool isParameterValue(const ir::Graph& g, ValueId value) {
  return value != ir::kNoValue && g.kind(g.producer(value)) == ir::NodeKind::Parameter;
}

// Conv or ConvTranspose, then an inference BatchNormalization of its output whose statistics
// and affine are parameters (fixed, so folded once), then optionally a Relu.
std::optional<FusedGroup> matchConvBatchNorm(const ir::Graph& g, NodeId conv) {
  using K = FusedGroup::Kind;
  const bool transposed = isOp(g, conv, "ConvTranspose");
  if ((!transposed && !isOp(g, conv, "Conv")) || g.inputs(conv).size() < 2 || g.outputs(conv).size() != 1)
    return std::nullopt;
  std::optional<NodeId> norm = soleReaderOf(g, g.outputs(conv)[0], "BatchNormalization", 5);
  if (!norm || g.inputs(*norm)[0] != g.outputs(conv)[0])
    return std::nullopt;
  const ir::Attribute* training = g.findAttribute(*norm, "training_mode");
  if (training && training->intValue != 0)
    return std::nullopt;
  std::vector<ValueId> operands{g.inputs(conv)[0], g.inputs(conv)[1],
                                g.inputs(conv).size() > 2 ? g.inputs(conv)[2] : ir::kNoValue};
  for (std::size_t i = 1; i < 5; ++i) {
    if (!isParameterValue(g, g.inputs(*norm)[i]))
      return std::nullopt;
    operands.push_back(g.inputs(*norm)[i]);
  }
  if (auto relu = soleReaderOf(g, g.outputs(*norm)[0], "Relu", 1))
    return FusedGroup{transposed ? K::ConvTransposeBatchNormRelu : K::ConvBatchNormRelu, {conv, *norm, *relu}, operands};
  return FusedGroup{transposed ? K::ConvTransposeBatchNorm : K::ConvBatchNorm, {conv, *norm}, operands};
}
// An inference BatchNormalization not after a convolution (DenseNet's pre-activation, after a
// Concat), then Relu: one pass over the tensor, Relu in place (batchNormInference).
std::optional<FusedGroup> matchBatchNormRelu(const ir::Graph& g, NodeId norm) {
  if (!isOp(g, norm, "BatchNormalization") || g.inputs(norm).size() != 5 || g.outputs(norm).size() != 1)
    return std::nullopt;
  const ir::Attribute* training = g.findAttribute(norm, "training_mode");
  if (training && training->intValue != 0)
    return std::nullopt;
  std::optional<NodeId> relu = soleReaderOf(g, g.outputs(norm)[0], "Relu", 1);
  if (!relu)
    return std::nullopt;
  const auto& in = g.inputs(norm);
  return FusedGroup{FusedGroup::Kind::BatchNormRelu, {norm, *relu}, {in.begin(), in.end()}};
}

// Whether `transpose` swaps dims 1 and 2 and keeps every other dim in place.
bool swapsDimsOneAndTwo(const ir::Graph& g, NodeId transpose) {
  const ir::Attribute* perm = g.findAttribute(transpose, "perm");
  if (!perm || perm->ints.size() < 3 || perm->ints[0] != 0 || perm->ints[1] != 2 || perm->ints[2] != 1)
    return false;
  for (std::size_t d = 3; d < perm->ints.size(); ++d)
    if (perm->ints[d] != static_cast<std::int64_t>(d))
      return false;
  return true;
}

// [Concat ->] Reshape -> Transpose swapping dims 1 and 2 -> Reshape, each inner value read by the
// next node alone (a channel shuffle; its shapes are checked when it runs).
std::optional<FusedGroup> matchChannelShuffle(const ir::Graph& g, NodeId first) {
  std::optional<NodeId> concat, reshape;
  if (isOp(g, first, "Concat") && !g.inputs(first).empty() && g.outputs(first).size() == 1) {
    concat = first;
    reshape = soleReaderOf(g, g.outputs(first)[0], "Reshape", 2);
    if (!reshape || g.inputs(*reshape)[0] != g.outputs(first)[0])
      return std::nullopt;
  } else if (isOp(g, first, "Reshape") && g.inputs(first).size() == 2 && g.outputs(first).size() == 1) {
    reshape = first;
  } else {
    return std::nullopt;
  }
  std::optional<NodeId> transpose = soleReaderOf(g, g.outputs(*reshape)[0], "Transpose", 1);
  if (!transpose || !swapsDimsOneAndTwo(g, *transpose))
    return std::nullopt;
  std::optional<NodeId> back = soleReaderOf(g, g.outputs(*transpose)[0], "Reshape", 2);
  if (!back || g.inputs(*back)[0] != g.outputs(*transpose)[0])
    return std::nullopt;
  std::vector<ValueId> operands{g.inputs(*reshape)[1], g.inputs(*back)[1]};
  if (concat) {
    operands.insert(operands.end(), g.inputs(*concat).begin(), g.inputs(*concat).end());
    return FusedGroup{FusedGroup::Kind::ConcatChannelShuffle, {*concat, *reshape, *transpose, *back}, operands};
  }
  operands.push_back(g.inputs(*reshape)[0]);
  return FusedGroup{FusedGroup::Kind::ChannelShuffle, {*reshape, *transpose, *back}, operands};
}

// The one op node that reads `value` (no graph output), with one output; none otherwise.
std::optional<NodeId> onlyReader(const ir::Graph& g, ValueId value) {
  auto users = g.users(value);
  if (users.size() != 1 || g.kind(users[0]) != ir::NodeKind::Op || g.outputs(users[0]).empty())
    return std::nullopt;
  return users[0];
}

// A Where's fill that adding to a score gives back (so that the fills add into one mask).
constexpr double kAbsorbingFill = -1e30;

// One step between attention's products (fusion.h), read by `step` from `scores`; false where it
// is none of them.
bool addAttentionStep(const ir::Graph& g, NodeId step, ValueId scores, bool masked, FusedGroup& group) {
  FusedGroup::AttentionSteps& steps = group.attention;
  auto in = g.inputs(step);
  if ((isOp(g, step, "Mul") || isOp(g, step, "Div")) && in.size() == 2 && !masked) {
    const bool div = isOp(g, step, "Div");
    if (div && in[0] != scores)
      return false;
    std::optional<double> constant = scalarConstant(g, otherOperand(g, step, scores));
    if (!constant || *constant == 0.0)
      return false;
    steps.scale = div ? steps.scale / *constant : steps.scale * *constant;
    return true;
  }
  if (isOp(g, step, "Add") && in.size() == 2) {
    const ValueId mask = otherOperand(g, step, scores);
    if (mask == ir::kNoValue)
      return false;
    steps.masks.push_back(FusedGroup::AttentionSteps::Mask::Add);
    steps.fills.push_back(0.0);
    group.operands.push_back(mask);
    return true;
  }
  if (isOp(g, step, "Where") && in.size() == 3 && in[0] != scores && (in[1] == scores) != (in[2] == scores)) {
    const bool fillWhereTrue = in[2] == scores;
    std::optional<double> fill = scalarConstant(g, fillWhereTrue ? in[1] : in[2]);
    if (!fill || !(*fill <= kAbsorbingFill))
      return false;
    steps.masks.push_back(fillWhereTrue ? FusedGroup::AttentionSteps::Mask::FillWhereTrue
                                        : FusedGroup::AttentionSteps::Mask::FillWhereFalse);
    steps.fills.push_back(*fill);
    group.operands.push_back(in[0]);
    return true;
  }
  return false;
}

// Where(IsNaN(p), 0, p) of the softmax's output p, its two nodes p's only readers (the exporters'
// boolean masks: a row no key is left to becomes zeros): their nodes joined to `group`, and the
// Where's output.
std::optional<ValueId> nanRowsZeroed(const ir::Graph& g, ValueId p, FusedGroup& group) {
  auto users = g.users(p);
  if (users.size() != 2)
    return std::nullopt;
  const NodeId isNan = isOp(g, users[0], "IsNaN") ? users[0] : users[1];
  const NodeId where = isNan == users[0] ? users[1] : users[0];
  if (!isOp(g, isNan, "IsNaN") || !isOp(g, where, "Where") || g.outputs(isNan).size() != 1 ||
      g.outputs(where).size() != 1)
    return std::nullopt;
  auto in = g.inputs(where);
  if (in.size() != 3 || in[0] != g.outputs(isNan)[0] || in[2] != p || onlyReader(g, in[0]) != where ||
      !near(scalarConstant(g, in[1]), 0.0))
    return std::nullopt;
  group.nodes.push_back(isNan);
  group.nodes.push_back(where);
  return g.outputs(where)[0];
}

// MatMul(Q, Kt) -> scale and mask steps -> Softmax -> [Dropout] -> MatMul(., V) (fusion.h), each
// inner value read by the next node alone.
std::optional<FusedGroup> matchAttention(const ir::Graph& g, NodeId first) {
  // Attention's operands are activations; a product with a stored weight is a layer's (its
  // weight may be held in a wing's own layout, which only the product kernels read).
  auto activation = [&](ValueId v) {
    const NodeId producer = g.producer(v);
    return g.kind(producer) != ir::NodeKind::Parameter && !isOp(g, producer, "Constant");
  };
  if (!isOp(g, first, "MatMul") || g.inputs(first).size() != 2 || g.outputs(first).size() != 1 ||
      !activation(g.inputs(first)[0]) || !activation(g.inputs(first)[1]))
    return std::nullopt;
  FusedGroup group{FusedGroup::Kind::Attention, {first}, {g.inputs(first)[0], g.inputs(first)[1], ir::kNoValue}};
  ValueId scores = g.outputs(first)[0];
  std::optional<NodeId> step = onlyReader(g, scores);
  for (bool masked = false; step && !isOp(g, *step, "Softmax"); step = onlyReader(g, scores)) {
    if (g.outputs(*step).size() != 1 || !addAttentionStep(g, *step, scores, masked, group))
      return std::nullopt;
    masked = !group.attention.masks.empty();
    group.nodes.push_back(*step);
    scores = g.outputs(*step)[0];
  }
  if (!step || g.inputs(*step).size() != 1 || g.outputs(*step).size() != 1)
    return std::nullopt;
  if (const ir::Attribute* axis = g.findAttribute(*step, "axis"))
    group.attention.softmaxAxis = axis->intValue;
  group.nodes.push_back(*step);
  ValueId probabilities = g.outputs(*step)[0];
  if (std::optional<ValueId> zeroed = nanRowsZeroed(g, probabilities, group)) {
    group.attention.zeroNanRows = true;
    probabilities = *zeroed;
  }
  std::optional<NodeId> next = onlyReader(g, probabilities);
  if (next && isOp(g, *next, "Dropout") && g.inputs(*next).size() <= 2 && g.inputs(*next)[0] == probabilities &&
      (g.outputs(*next).size() == 1 || g.users(g.outputs(*next)[1]).empty())) {
    group.nodes.push_back(*next);
    probabilities = g.outputs(*next)[0];
    next = onlyReader(g, probabilities);
  }
  if (!next || !isOp(g, *next, "MatMul") || g.inputs(*next).size() != 2 || g.outputs(*next).size() != 1 ||
      g.inputs(*next)[0] != probabilities || g.inputs(*next)[1] == probabilities || !activation(g.inputs(*next)[1]))
    return std::nullopt;
  group.nodes.push_back(*next);
  group.operands[2] = g.inputs(*next)[1];
  return group;
}

// Concat, then an inference BatchNormalization that alone reads the concatenation, then Relu.
std::optional<FusedGroup> matchConcatBatchNormRelu(const ir::Graph& g, NodeId concat) {
  if (!isOp(g, concat, "Concat") || g.inputs(concat).empty() || g.outputs(concat).size() != 1)
    return std::nullopt;
  std::optional<NodeId> norm = soleReaderOf(g, g.outputs(concat)[0], "BatchNormalization", 5);
  if (!norm || g.inputs(*norm)[0] != g.outputs(concat)[0])
    return std::nullopt;
  std::optional<FusedGroup> normRelu = matchBatchNormRelu(g, *norm);
  if (!normRelu)
    return std::nullopt;
  std::vector<ValueId> operands(g.inputs(*norm).begin() + 1, g.inputs(*norm).end());
  operands.insert(operands.end(), g.inputs(concat).begin(), g.inputs(concat).end());
  return FusedGroup{FusedGroup::Kind::ConcatBatchNormRelu, {concat, *norm, normRelu->nodes[1]}, operands};
}
} // namespace

FusionPlan planFusions(const ir::Graph& g, bool attention) {
  FusionPlan plan;
  plan.groupOf = IdVector<NodeId, std::int32_t>(g.numNodes(), -1);
  for (std::uint32_t n = 0; n < g.numNodes(); ++n) {
    NodeId node{n};
    if (plan.groupOf[node] >= 0)
      continue;
    std::optional<FusedGroup> group; // attention before MatMulBias: Q Kt + mask is no bias
    if (attention)
      group = matchAttention(g, node);
    if (!group)
      group = matchMatMulBiasGelu(g, node);
    if (!group)
      group = matchMatMulBiasActivation(g, node);
    if (!group)
      group = matchMatMulBias(g, node);
    if (!group)
      group = matchGelu(g, node);
    if (!group)
      group = matchConvBatchNorm(g, node);
    if (!group)
      group = matchConv(g, node);
    if (!group)
      group = matchLayerNorm(g, node);
    if (!group)
      group = matchConcatBatchNormRelu(g, node);
    if (!group)
      group = matchChannelShuffle(g, node);
    if (!group)
      group = matchBatchNormRelu(g, node);
    if (!group)
      continue;
    bool free = true; // a node joins one group at most
    for (NodeId member : group->nodes)
      free = free && plan.groupOf[member] < 0;
    if (!free)
      continue;
    for (NodeId member : group->nodes)
      plan.groupOf[member] = static_cast<std::int32_t>(plan.groups.size());
    plan.groups.push_back(std::move(*group));
  }
  return plan;
}

} // namespace cleave::runtime
