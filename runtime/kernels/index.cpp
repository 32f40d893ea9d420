// runtime/kernels/index.cpp - ONNX's index and scatter ops on ATen: ScatterElements, GatherND,
// ScatterND, OneHot, Compress, ReverseSequence, Unique. Negative indices count from the end of their axis, as ONNX says.
#include <algorithm>
#include <numeric>

#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

Outputs scatterElements(KernelContext& c) {
  const at::Tensor& data = c.input(0);
  std::int64_t axis = normalizeAxis(c.intAttr("axis", 0), data.dim());
  at::Tensor idx = fixNegativeIndices(c.input(1), data.size(axis));
  at::Tensor updates = c.input(2).to(data.scalar_type());
  std::string reduction = c.stringAttr("reduction", "none");
  if (reduction == "none")
    return {data.scatter(axis, idx, updates)};
  if (reduction == "add")
    return {data.scatter_add(axis, idx, updates)};
  const char* reduce = reduction == "mul" ? "prod" : reduction == "max" ? "amax" : reduction == "min" ? "amin" : nullptr;
  if (!reduce)
    throw KernelError("unknown reduction '" + reduction + "'");
  return {data.scatter_reduce(axis, idx, updates, reduce, /*include_self=*/true)};
}

// The index tensors of GatherND / ScatterND: for data [B..., D1, D2, ...] (batch_dims B) and
// indices [B..., M..., K], one int64 tensor per indexed dim, each [B..., M...] (batch dims as
// broadcast aranges), ready for Tensor::index / index_put_.
c10::List<c10::optional<at::Tensor>> ndIndices(const at::Tensor& data, const at::Tensor& indices,
                                               std::int64_t batchDims) {
  std::int64_t k = indices.size(-1);
  c10::List<c10::optional<at::Tensor>> index;
  std::int64_t rank = indices.dim() - 1; // dims of the index positions [B..., M...]
  for (std::int64_t b = 0; b < batchDims; ++b) {
    std::vector<std::int64_t> shape(static_cast<std::size_t>(rank), 1);
    shape[static_cast<std::size_t>(b)] = data.size(b);
    index.push_back(at::arange(data.size(b), indices.options().dtype(at::kLong)).reshape(shape));
  }
  for (std::int64_t i = 0; i < k; ++i)
    index.push_back(fixNegativeIndices(indices.select(-1, i), data.size(batchDims + i)));
  return index;
}

Outputs gatherNd(KernelContext& c) {
  const at::Tensor& data = c.input(0);
  return {data.index(ndIndices(data, c.input(1), c.intAttr("batch_dims", 0)))};
}

Outputs scatterNd(KernelContext& c) {
  at::Tensor out = c.input(0).clone();
  c10::List<c10::optional<at::Tensor>> index = ndIndices(out, c.input(1), 0);
  at::Tensor updates = c.input(2).to(out.scalar_type());
  std::string reduction = c.stringAttr("reduction", "none");
  if (reduction == "none" || reduction == "add")
    return {out.index_put_(index, updates, /*accumulate=*/reduction == "add")};
  if (reduction != "mul" && reduction != "max" && reduction != "min")
    throw KernelError("unknown reduction '" + reduction + "'");
  // Indices may repeat, and each update must see the ones before it: one update slice at a time.
  const at::Tensor& indices = c.input(1);
  std::int64_t k = indices.size(-1);
  at::Tensor flat = indices.to(at::kLong).reshape({-1, k});
  at::Tensor slices = updates.reshape({flat.size(0), -1});
  for (std::int64_t m = 0; m < flat.size(0); ++m) {
    at::Tensor target = out;
    for (std::int64_t i = 0; i < k; ++i) {
      std::int64_t at = flat[m][i].item<std::int64_t>();
      target = target.select(0, at < 0 ? at + target.size(0) : at);
    }
    at::Tensor update = slices[m].reshape(target.sizes());
    target.copy_(reduction == "mul" ? target * update : reduction == "max" ? at::maximum(target, update)
                                                                          : at::minimum(target, update));
  }
  return {out};
}

Outputs oneHot(KernelContext& c) {
  std::int64_t depth = c.input(1).reshape({-1})[0].item().toLong();
  const at::Tensor& values = c.input(2); // [off, on]
  at::Tensor idx = fixNegativeIndices(c.input(0).to(at::kLong), depth);
  at::Tensor hot = idx.unsqueeze(-1) == at::arange(depth, idx.options());
  std::int64_t axis = c.intAttr("axis", -1);
  axis = axis < 0 ? axis + hot.dim() : axis;
  return {at::where(hot, values[1], values[0]).movedim(-1, axis)};
}

Outputs compress(KernelContext& c) {
  at::Tensor x = c.input(0);
  at::Tensor kept = c.input(1).to(at::kBool).nonzero().reshape({-1});
  if (!c.attribute("axis"))
    return {x.reshape({-1}).index_select(0, kept)};
  std::int64_t axis = normalizeAxis(c.intAttr("axis", 0), x.dim());
  return {x.index_select(axis, kept)};
}
// Reverses each batch entry's first sequence_lens[b] steps along time_axis; later steps stay.
Outputs reverseSequence(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  std::int64_t timeAxis = normalizeAxis(c.intAttr("time_axis", 0), x.dim());
  std::int64_t batchAxis = normalizeAxis(c.intAttr("batch_axis", 1), x.dim());
  if (timeAxis == batchAxis || x.dim() < 2)
    throw KernelError("time_axis and batch_axis must be two different axes");
  at::Tensor lengths = c.input(1).to(at::kLong);
  std::int64_t steps = x.size(timeAxis), batch = x.size(batchAxis);
  if (lengths.dim() != 1 || lengths.size(0) != batch)
    throw KernelError("sequence_lens must have one entry per batch element");
  at::Tensor index = reversedTimeIndex(lengths, steps); // [time, batch]
  if (timeAxis > batchAxis)
    index = index.t();
  std::vector<std::int64_t> view(x.dim(), 1);
  view[timeAxis] = steps;
  view[batchAxis] = batch;
  return {at::gather(x, timeAxis, index.reshape(view).expand(x.sizes()))};
}
// Unique's slices (rows of `rows`, [n, width]) compared lexicographically by value.
template <typename T>
std::vector<std::int64_t> rowOrder(const at::Tensor& rows) {
  const T* data = rows.data_ptr<T>();
  const std::int64_t width = rows.size(1);
  std::vector<std::int64_t> order(static_cast<std::size_t>(rows.size(0)));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return std::lexicographical_compare(data + a * width, data + (a + 1) * width, data + b * width,
                                        data + (b + 1) * width);
  });
  return order;
}

template <typename T>
bool sameRow(const at::Tensor& rows, std::int64_t a, std::int64_t b) {
  const T* data = rows.data_ptr<T>();
  const std::int64_t width = rows.size(1);
  return std::equal(data + a * width, data + (a + 1) * width, data + b * width);
}

// Unique: the distinct elements (or slices along `axis`), sorted or in order of first occurrence,
// with each one's first index, every element's position among them and their counts.
// O(n log n * slice size) for n slices.
Outputs unique(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  const bool byAxis = c.attribute("axis") != nullptr;
  const std::int64_t axis = byAxis ? normalizeAxis(c.intAttr("axis", 0), x.dim()) : 0;
  at::Tensor slices = byAxis ? x.movedim(axis, 0) : x.flatten();
  const std::int64_t n = slices.size(0);
  // Rows compared as int64 or double (exact for every ONNX integer and float type but u64 >= 2^63).
  const bool integral = at::isIntegralType(x.scalar_type(), true);
  at::Tensor rows = slices.reshape({n, -1}).to(integral ? at::kLong : at::kDouble).contiguous();
  std::vector<std::int64_t> order = integral ? rowOrder<std::int64_t>(rows) : rowOrder<double>(rows);
  auto same = [&](std::int64_t a, std::int64_t b) {
    return integral ? sameRow<std::int64_t>(rows, a, b) : sameRow<double>(rows, a, b);
  };
  // Groups of equal slices in sorted order; the stable sort puts each group's first occurrence first.
  std::vector<std::int64_t> firsts, counts, groupOf(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || !same(order[i - 1], order[i])) {
      firsts.push_back(order[i]);
      counts.push_back(0);
    }
    groupOf[static_cast<std::size_t>(order[i])] = static_cast<std::int64_t>(firsts.size()) - 1;
    ++counts.back();
  }
  std::vector<std::int64_t> rank(firsts.size()); // group -> output position
  std::iota(rank.begin(), rank.end(), 0);
  if (!c.intAttr("sorted", 1)) {
    std::vector<std::int64_t> byFirst(firsts.size());
    std::iota(byFirst.begin(), byFirst.end(), 0);
    std::sort(byFirst.begin(), byFirst.end(), [&](std::int64_t a, std::int64_t b) { return firsts[a] < firsts[b]; });
    for (std::size_t p = 0; p < byFirst.size(); ++p)
      rank[static_cast<std::size_t>(byFirst[p])] = static_cast<std::int64_t>(p);
  }
  std::vector<std::int64_t> outFirsts(firsts.size()), outCounts(firsts.size()), inverse(groupOf.size());
  for (std::size_t g = 0; g < firsts.size(); ++g) {
    outFirsts[static_cast<std::size_t>(rank[g])] = firsts[g];
    outCounts[static_cast<std::size_t>(rank[g])] = counts[g];
  }
  for (std::size_t i = 0; i < groupOf.size(); ++i)
    inverse[i] = rank[static_cast<std::size_t>(groupOf[i])];
  auto asTensor = [](const std::vector<std::int64_t>& values) {
    return at::tensor(at::ArrayRef<std::int64_t>(values), at::TensorOptions().dtype(at::kLong));
  };
  at::Tensor indices = asTensor(outFirsts);
  at::Tensor y = slices.index_select(0, indices);
  return {byAxis ? y.movedim(0, axis) : y, indices, asTensor(inverse), asTensor(outCounts)};
}
} // namespace

void registerIndexKernels(KernelTable& t) {
  // TensorScatter (opset 24): the cache with each batch entry's update written along `axis` from
  // its write index (0 when none is given), wrapping around in circular mode; as a scatter.
  t.add("TensorScatter", [](KernelContext& c) -> Outputs {
    const at::Tensor &cache = c.input(0), &update = c.input(1);
    const std::int64_t axis = normalizeAxis(c.intAttr("axis", -2), cache.dim());
    const std::int64_t length = update.size(axis), capacity = cache.size(axis);
    at::Tensor starts = c.has(2) ? c.input(2).to(at::kLong) : at::zeros({cache.size(0)}, cache.options().dtype(at::kLong));
    std::vector<std::int64_t> startShape(static_cast<std::size_t>(cache.dim()), 1), stepShape = startShape;
    startShape[0] = cache.size(0);
    stepShape[static_cast<std::size_t>(axis)] = length;
    at::Tensor positions = starts.reshape(startShape) + at::arange(length, starts.options()).reshape(stepShape);
    if (c.stringAttr("mode", "linear") == "circular")
      positions = at::remainder(positions, capacity);
    else if (length > 0 && (positions.min().item<std::int64_t>() < 0 || positions.max().item<std::int64_t>() >= capacity))
      throw KernelError("TensorScatter writes past the cache's " + std::to_string(capacity) + " positions");
    return {cache.scatter(axis, positions.expand(update.sizes()), update)};
  });
  t.add("Unique", unique);
  t.add("ScatterElements", scatterElements);
  t.add("Scatter", scatterElements); // opset 9-10 name, converted models keep it rarely
  t.add("GatherND", gatherNd);
  t.add("ScatterND", scatterNd);
  t.add("OneHot", oneHot, hostOperands({1}));
  t.add("Compress", compress);
  t.add("ReverseSequence", reverseSequence);
}

} // namespace cleave::runtime
