// runtime/kernels/attention.cpp - ONNX's Attention (opsets 23-25) as one kernel, instead of its
// function body's ~40 ops: Q, K and V (4-D [batch, heads, sequence, head], or 3-D split by
// q_num_heads / kv_num_heads), a past key and value cache concatenated in front, grouped-query
// heads repeated, an additive bias made of the mask (boolean or additive, padded to the keys with
// "not attended"), the bottom-right causal frontier, the sliding window and the keys past each
// batch's nonpad_kv_seqlen; softcap before the bias; softmax in softmax_precision; a row no key is
// left to is all zeros. The optional fourth output is the QK product at qk_matmul_output_mode's
// stage. Each step as onnx's reference computes it, in Q's type; the float32 case without a
// softcap, a QK output or a fully masked row runs as ATen's fused scaled_dot_product_attention
// (grouped heads and a top-left causal frontier given to it as such, without a bias).
// Complexity: O(batch x heads x queries x keys x head) arithmetic, the bias O(its broadcast size).
#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <optional>

#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

constexpr std::int64_t kQkAfterBias = 2, kQkAfterSoftmax = 3;

// [batch, heads, sequence, head]: a 4-D operand as it is, a 3-D [batch, sequence, heads x head]
// split into `heads`.
at::Tensor headsFirst(const at::Tensor& x, std::int64_t heads, const char* name) {
  if (x.dim() == 4)
    return x;
  if (x.dim() != 3 || heads <= 0 || x.size(2) % heads != 0)
    throw KernelError(std::string("Attention's ") + name +
                      " must be 4-D, or 3-D with its width a multiple of the heads attribute");
  return x.reshape({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

// Where the queries of each batch start among the keys: the past cache's length, or, for an
// external cache, nonpad_kv_seqlen - queries per batch ([batch, 1, 1, 1]); 0 without either.
struct QueryOffset {
  std::int64_t scalar = 0;
  at::Tensor perBatch; // defined for an external cache
};

// 0 where `allowed`, -inf elsewhere, in `like`'s type.
at::Tensor biasWhere(const at::Tensor& allowed, const at::Tensor& like) {
  return at::where(allowed, at::zeros({}, like.options()),
                   at::full({}, -std::numeric_limits<double>::infinity(), like.options()));
}

// (i + offset) - j over queries i and keys j: [q, kv], or [batch, 1, q, kv] per batch.
at::Tensor frontierDistance(std::int64_t queries, std::int64_t keys, const QueryOffset& offset, const at::Tensor& like) {
  at::TensorOptions longs = like.options().dtype(at::kLong);
  at::Tensor i = at::arange(queries, longs).reshape({queries, 1}), j = at::arange(keys, longs).reshape({1, keys});
  if (offset.perBatch.defined())
    return (i + offset.perBatch) - j;
  return (i + offset.scalar) - j;
}

// The additive bias of mask, causal frontier, sliding window and padding, broadcastable to
// [batch, heads, queries, keys], in Q's type.
at::Tensor attentionBias(KernelContext& c, const at::Tensor& q, std::int64_t keys, const QueryOffset& offset) {
  const std::int64_t queries = q.size(2);
  at::Tensor bias = at::zeros({queries, keys}, q.options());
  if (c.has(3)) {
    at::Tensor mask = c.input(3);
    const bool boolean = mask.scalar_type() == at::kBool;
    if (const std::int64_t pad = keys - mask.size(-1); pad > 0)
      mask = at::constant_pad_nd(mask.to(boolean ? at::kFloat : mask.scalar_type()), {0, pad},
                                 boolean ? 0.0 : -std::numeric_limits<double>::infinity())
                 .to(mask.scalar_type());
    bias = bias + (boolean ? biasWhere(mask, q) : mask.to(q.scalar_type()));
  }
  if (c.intAttr("is_causal", 0) != 0)
    bias = bias + biasWhere(frontierDistance(queries, keys, offset, q) >= 0, q);
  const std::int64_t left = c.intAttr("left_window_size", -1), right = c.intAttr("right_window_size", -1);
  if (left >= 0 || right >= 0) {
    at::Tensor distance = frontierDistance(queries, keys, offset, q);
    at::Tensor allowed = at::ones_like(distance, distance.options().dtype(at::kBool));
    if (left >= 0)
      allowed = allowed.logical_and(distance <= left);
    if (right >= 0)
      allowed = allowed.logical_and(distance >= -right);
    bias = bias + biasWhere(allowed, q);
  }
  if (c.has(6)) { // nonpad_kv_seqlen: keys past each batch's count are padding
    at::Tensor counts = c.input(6).to(at::kLong).reshape({-1, 1, 1, 1});
    bias = bias + biasWhere(at::arange(keys, counts.options()).reshape({1, 1, 1, keys}) < counts, q);
  }
  return bias;
}

// softmax(QK + bias) @ V and the QK output, step by step as the reference computes them.
std::pair<at::Tensor, at::Tensor> attendStepwise(KernelContext& c, const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v, const at::Tensor& bias, double scale) {
  const at::Tensor root = at::full({}, std::sqrt(scale), q.options());
  at::Tensor qk = at::matmul(q * root, (k * root).transpose(-1, -2));
  if (const float softcap = c.floatAttr("softcap", 0.0f); softcap > 0.0f)
    qk = at::tanh(qk / softcap) * softcap;
  at::Tensor withBias = qk + bias;
  const std::int64_t mode = c.intAttr("qk_matmul_output_mode", 0);
  at::Tensor qkOutput = mode == kQkAfterBias ? withBias : qk;
  at::Tensor logits = withBias;
  if (c.attribute("softmax_precision")) {
    std::optional<ir::DType> precision = ir::dtypeFromOnnx(static_cast<int>(c.intAttr("softmax_precision", 1)));
    Expected<at::ScalarType> type = scalarTypeOf(precision.value_or(ir::DType::Undefined));
    if (!type)
      throw KernelError("Attention's softmax_precision names no type ATen has");
    logits = logits.to(*type);
  }
  at::Tensor rowMasked = std::get<0>(bias.max(-1, /*keepdim=*/true)).isneginf();
  at::Tensor probabilities = at::where(rowMasked, at::zeros({}, logits.options()), at::softmax(logits, -1));
  if (mode == kQkAfterSoftmax)
    qkOutput = probabilities;
  return {at::matmul(probabilities.to(q.scalar_type()), v), qkOutput.to(q.scalar_type())};
}

// Whether ATen's fused attention computes the node as the reference does: float32, no softcap,
// no QK output, softmax in float32; `plain`: nothing but an optional top-left causal frontier
// (no mask, window, padding, or past cache that moves the frontier), which it takes as is_causal.
struct FusedPath {
  bool eligible = false, plain = false;
};
FusedPath fusedPath(KernelContext& c, const at::Tensor& q) {
  FusedPath path;
  path.eligible = q.scalar_type() == at::kFloat && c.numOutputs() <= 3 && c.floatAttr("softcap", 0.0f) <= 0.0f &&
                  !c.attribute("softmax_precision");
  path.plain = path.eligible && !c.has(3) && !c.has(6) && c.intAttr("left_window_size", -1) < 0 &&
               c.intAttr("right_window_size", -1) < 0 && !(c.has(4) && c.intAttr("is_causal", 0) != 0);
  return path;
}

Outputs attention(KernelContext& c) {
  const at::Tensor& query = c.input(0);
  at::Tensor q = headsFirst(query, c.intAttr("q_num_heads", 0), "Q");
  at::Tensor k = headsFirst(c.input(1), c.intAttr("kv_num_heads", 0), "K");
  at::Tensor v = headsFirst(c.input(2), c.intAttr("kv_num_heads", 0), "V");
  if (c.has(4) != c.has(5))
    throw KernelError("Attention takes past_key and past_value together");
  QueryOffset offset;
  if (c.has(4)) {
    offset.scalar = c.input(4).size(2);
    k = at::cat({c.input(4), k}, 2);
    v = at::cat({c.input(5), v}, 2);
  } else if (c.has(6)) {
    offset.perBatch = (c.input(6).to(at::kLong) - q.size(2)).reshape({-1, 1, 1, 1});
  }
  const at::Tensor presentKey = k, presentValue = v;
  const std::int64_t queryHeads = q.size(1), keyHeads = k.size(1);
  const bool grouped = queryHeads != keyHeads && keyHeads > 0 && queryHeads % keyHeads == 0 && v.size(1) == keyHeads;
  const double scale = c.attribute("scale") ? c.floatAttr("scale", 1.0f) : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const FusedPath path = fusedPath(c, q);
  at::Tensor y, qkOutput;
  if (path.plain) {
    y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, c.intAttr("is_causal", 0) != 0, scale, grouped);
  } else {
    if (grouped) { // [h0, h0, h1, h1, ...]
      k = k.repeat_interleave(queryHeads / keyHeads, 1);
      v = v.repeat_interleave(queryHeads / keyHeads, 1);
    }
    at::Tensor bias = attentionBias(c, q, k.size(2), offset);
    if (path.eligible && !std::get<0>(bias.max(-1)).isneginf().any().item<bool>())
      y = at::scaled_dot_product_attention(q, k, v, bias.expand({q.size(0), q.size(1), q.size(2), k.size(2)}), 0.0,
                                           false, scale);
    else
      std::tie(y, qkOutput) = attendStepwise(c, q, k, v, bias, scale);
  }
  if (query.dim() == 3) { // back to [batch, sequence, heads x head]
    y = y.transpose(1, 2);
    y = y.reshape({y.size(0), y.size(1), -1});
  }
  Outputs outputs{y.contiguous(), presentKey, presentValue};
  if (c.numOutputs() > 3)
    outputs.push_back(qkOutput);
  outputs.resize(std::min<std::size_t>(outputs.size(), c.numOutputs()));
  return outputs;
}
} // namespace

void registerAttentionKernels(KernelTable& t) {
  t.add("Attention", attention); // opsets 23-25
}

} // namespace cleave::runtime
