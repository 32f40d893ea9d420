// runtime/kernels/reduce.cpp - reductions (axes as an attribute, or as an operand from opset 13 for
// ReduceSum and 18 for the others; keepdims; noop_with_empty_axes), ArgMax/ArgMin, TopK (ties in
// index order), CumSum.
#include <ATen/Dispatch.h>

#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

enum class Reduction { Mean, Sum, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

// The maximum (minimum) of an empty set is the type's lowest (highest) value: -inf (inf) for
// floats, false (true) for bool (ReduceMax/ReduceMin-20), shaped as the reduction would be.
at::Tensor emptyExtreme(const at::Tensor& x, const std::vector<std::int64_t>& axes, bool keep, bool max) {
  std::vector<std::int64_t> shape;
  for (std::int64_t d = 0; d < x.dim(); ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced || keep)
      shape.push_back(reduced ? 1 : x.size(d));
  }
  at::Tensor out = at::empty(shape, x.options());
  if (x.scalar_type() == at::kBool)
    return out.fill_(!max);
  if (at::isFloatingType(x.scalar_type()))
    return out.fill_(max ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity());
  AT_DISPATCH_INTEGRAL_TYPES(x.scalar_type(), "emptyExtreme", [&] {
    out.fill_(max ? std::numeric_limits<scalar_t>::lowest() : std::numeric_limits<scalar_t>::max());
  });
  return out;
}

template <Reduction R, int AxesOperandSince> Outputs reduce(KernelContext& c) {
  at::Tensor x = c.input(0);
  std::vector<std::int64_t> axes;
  if (c.opset() >= AxesOperandSince) {
    if (c.has(1))
      axes = c.ints(1);
  } else {
    axes = c.intsAttr("axes");
  }
  bool keep = c.intAttr("keepdims", 1) != 0;
  if (axes.empty()) {
    if (c.intAttr("noop_with_empty_axes", 0) != 0)
      return {x};
    for (std::int64_t d = 0; d < x.dim(); ++d)
      axes.push_back(d);
  }
  for (std::int64_t& a : axes)
    a = normalizeAxis(a, x.dim());
  if ((R == Reduction::Max || R == Reduction::Min) && x.numel() == 0)
    return {emptyExtreme(x, axes, keep, R == Reduction::Max)};
  switch (R) {
  case Reduction::Mean: return {x.mean(axes, keep)};
  case Reduction::Sum: return {x.sum(axes, keep)};
  case Reduction::Max: return {x.amax(axes, keep)};
  case Reduction::Min: return {x.amin(axes, keep)};
  case Reduction::Prod: {
    std::sort(axes.rbegin(), axes.rend());
    for (std::int64_t a : axes)
      x = x.prod(a, keep);
    return {x};
  }
  case Reduction::L1: return {x.abs().sum(axes, keep)};
  case Reduction::L2: return {x.pow(2).sum(axes, keep).sqrt()};
  case Reduction::LogSum: return {x.sum(axes, keep).log()};
  case Reduction::LogSumExp: return {at::logsumexp(x, axes, keep)};
  case Reduction::SumSquare: return {x.pow(2).sum(axes, keep)};
  }
  return {};
}

template <bool Max> Outputs argExtreme(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  std::int64_t axis = normalizeAxis(c.intAttr("axis", 0), x.dim());
  bool keep = c.intAttr("keepdims", 1) != 0;
  if (c.intAttr("select_last_index", 0)) { // the last occurrence: search the flipped axis
    at::Tensor flipped = x.flip(axis);
    at::Tensor index = Max ? flipped.argmax(axis, keep) : flipped.argmin(axis, keep);
    return {x.size(axis) - 1 - index};
  }
  return {Max ? x.argmax(axis, keep) : x.argmin(axis, keep)};
}
// Whether at::topk's answer may break ONNX's tie rule: two selected values are equal or a value
// left out equals the k-th. O(n) over x; x holds no NaN.
bool topKHasTies(const at::Tensor& x, const at::Tensor& values, std::int64_t axis, bool largest) {
  const std::int64_t k = values.size(axis);
  if (k == 0)
    return false;
  if (k > 1 && values.narrow(axis, 1, k - 1).eq(values.narrow(axis, 0, k - 1)).any().item<bool>())
    return true;
  // Every value strictly past the k-th is selected, so more than k at or past it means a tie left out.
  const at::Tensor kth = values.narrow(axis, k - 1, 1);
  const at::Tensor atOrPast = largest ? x.ge(kth) : x.le(kth);
  return atOrPast.sum(axis).gt(k).any().item<bool>();
}

// TopK with ONNX's tie rule, given at::topk's `values` (right as values, not as indices): per row
// the entries strictly past the k-th value, then the first entries equal to it (index order) to
// make k, then a stable sort of those k. O(n) over x plus O(k log k) per row.
std::pair<at::Tensor, at::Tensor> topKWithTiesByIndex(const at::Tensor& x, const at::Tensor& values,
                                                      std::int64_t axis, bool largest) {
  const std::int64_t k = values.size(axis), n = x.size(axis);
  const at::Tensor rows = x.movedim(axis, -1).contiguous();
  const at::Tensor kth = values.narrow(axis, k - 1, 1).movedim(axis, -1);
  const at::Tensor past = largest ? rows.gt(kth) : rows.lt(kth);
  const at::Tensor equal = rows.eq(kth);
  const at::Tensor stillNeeded = k - past.sum(-1, true);
  const at::Tensor chosen = past.logical_or(equal.logical_and(equal.cumsum(-1).le(stillNeeded)));
  std::vector<std::int64_t> shape = rows.sizes().vec();
  shape.back() = k;
  // Exactly k chosen per row; nonzero lists them row by row, in index order.
  const at::Tensor candidateIndices = chosen.reshape({-1, n}).nonzero().select(1, 1).reshape(shape);
  const at::Tensor candidates = rows.gather(-1, candidateIndices);
  auto [sorted, order] = at::sort(candidates, /*stable=*/true, -1, /*descending=*/largest);
  return {sorted.movedim(-1, axis).contiguous(), candidateIndices.gather(-1, order).movedim(-1, axis).contiguous()};
}

// ONNX's TopK: the k largest (or smallest) along `axis`, sorted, equal values in index order
// (lower first). at::topk orders ties arbitrarily, so where there are ties they are chosen and
// ordered by index (topKWithTiesByIndex); with a NaN (unequal to everything) the stable sort of
// the whole axis answers. O(n log k) without ties, O(n + k log k) with them.
Outputs topK(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  const std::int64_t k = c.opset() >= 10 ? c.ints(1).at(0) : c.intAttr("k", 1);
  const std::int64_t axis = normalizeAxis(c.intAttr("axis", -1), x.dim());
  const bool largest = c.intAttr("largest", 1) != 0;
  if (x.is_floating_point() && x.isnan().any().item<bool>()) {
    auto [sorted, order] = at::sort(x, /*stable=*/true, axis, /*descending=*/largest);
    return {sorted.narrow(axis, 0, k), order.narrow(axis, 0, k)};
  }
  auto [values, indices] = at::topk(x, k, axis, largest, true);
  if (!topKHasTies(x, values, axis, largest))
    return {values, indices};
  auto [tiedValues, tiedIndices] = topKWithTiesByIndex(x, values, axis, largest);
  return {tiedValues, tiedIndices};
}
} // namespace

void registerReduceKernels(KernelTable& t) {
  t.add("ReduceMean", reduce<Reduction::Mean, 18>, hostOperands({1}));
  t.add("ReduceSum", reduce<Reduction::Sum, 13>, hostOperands({1}));
  t.add("ReduceMax", reduce<Reduction::Max, 18>, hostOperands({1}));
  t.add("ReduceMin", reduce<Reduction::Min, 18>, hostOperands({1}));
  t.add("ReduceProd", reduce<Reduction::Prod, 18>, hostOperands({1}));
  t.add("ReduceL1", reduce<Reduction::L1, 18>, hostOperands({1}));
  t.add("ReduceL2", reduce<Reduction::L2, 18>, hostOperands({1}));
  t.add("ReduceLogSum", reduce<Reduction::LogSum, 18>, hostOperands({1}));
  t.add("ReduceLogSumExp", reduce<Reduction::LogSumExp, 18>, hostOperands({1}));
  t.add("ReduceSumSquare", reduce<Reduction::SumSquare, 18>, hostOperands({1}));
  t.add("ArgMax", argExtreme<true>);
  t.add("ArgMin", argExtreme<false>);
  t.add("TopK", topK, hostOperands({1}));
  t.add("CumSum", [](KernelContext& c) -> Outputs {
    at::Tensor x = c.input(0);
    std::int64_t axis = normalizeAxis(c.input(1).item<std::int64_t>(), x.dim());
    bool exclusive = c.intAttr("exclusive", 0) != 0, reverse = c.intAttr("reverse", 0) != 0;
    if (reverse)
      x = x.flip(axis);
    at::Tensor sums = x.cumsum(axis, x.scalar_type()); // ATen would widen integers to int64
    if (exclusive)
      sums = sums - x;
    return {reverse ? sums.flip(axis) : sums};
  }, hostOperands({1}));
  t.add("CumProd", [](KernelContext& c) -> Outputs { // opset 26
    at::Tensor x = c.input(0);
    std::int64_t axis = normalizeAxis(c.input(1).item<std::int64_t>(), x.dim());
    bool exclusive = c.intAttr("exclusive", 0) != 0, reverse = c.intAttr("reverse", 0) != 0;
    if (reverse)
      x = x.flip(axis);
    at::Tensor products = x.cumprod(axis, x.scalar_type());
    // Exclusive: each product of the elements before it, so the first is 1 (no division, which a
    // zero would break).
    if (exclusive && x.size(axis) > 0)
      products = at::cat({at::ones_like(x.narrow(axis, 0, 1)), products.narrow(axis, 0, x.size(axis) - 1)}, axis);
    return {reverse ? products.flip(axis) : products};
  }, hostOperands({1}));
}

} // namespace cleave::runtime
