// runtime/ops_index.cpp - ONNX's index and scatter ops on ATen: ScatterElements, GatherND,
// ScatterND, OneHot, Compress, ReverseSequence. Negative indices count from the end of their axis, as ONNX says.
#include "runtime/kernel.h"

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
} // namespace

void registerIndexKernels(KernelTable& t) {
  t.add("ScatterElements", scatterElements);
  t.add("Scatter", scatterElements); // opset 9-10 name, converted models keep it rarely
  t.add("GatherND", gatherNd);
  t.add("ScatterND", scatterNd);
  t.add("OneHot", oneHot);
  t.add("Compress", compress);
  t.add("ReverseSequence", reverseSequence);
}

} // namespace cleave::runtime
