#include "runtime/kernels/helpers.h"

#include <optional>

#include "runtime/engine/fast_paths.h"

namespace cleave::runtime {

at::Tensor fixNegativeIndices(const at::Tensor& indices, std::int64_t size) {
  at::Tensor idx = indices.to(at::kLong);
  return at::where(idx < 0, idx + size, idx);
}

std::int64_t normalizeAxis(std::int64_t axis, std::int64_t rank) {
  std::int64_t fixed = axis < 0 ? axis + rank : axis;
  if (fixed < 0 || fixed >= std::max<std::int64_t>(rank, 1))
    throw KernelError("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return fixed;
}

at::Tensor flattenTo2d(const at::Tensor& x, std::int64_t axis) {
  if (axis < 0)
    axis += x.dim();
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < axis; ++d)
    outer *= x.size(d);
  return x.reshape({outer, outer == 0 ? 0 : x.numel() / std::max<std::int64_t>(outer, 1)});
}

at::Tensor geluInMemoryOrder(const at::Tensor& x, c10::string_view approximate) {
  if (x.is_contiguous() || !x.is_non_overlapping_and_dense())
    return at::gelu(x, approximate);
  std::vector<std::int64_t> memoryOrder(static_cast<std::size_t>(x.dim())); // outermost dim first
  std::iota(memoryOrder.begin(), memoryOrder.end(), 0);
  std::stable_sort(memoryOrder.begin(), memoryOrder.end(),
                   [&](std::int64_t a, std::int64_t b) { return x.stride(a) > x.stride(b); });
  const at::Tensor inOrder = x.permute(memoryOrder);
  if (!inOrder.is_contiguous())
    return at::gelu(x, approximate);
  std::vector<std::int64_t> back(memoryOrder.size());
  for (std::size_t i = 0; i < memoryOrder.size(); ++i)
    back[static_cast<std::size_t>(memoryOrder[i])] = static_cast<std::int64_t>(i);
  return at::gelu(inOrder, approximate).permute(back);
}



std::int64_t channelRowStride(const at::Tensor& t) {
  if (t.dim() < 2 || t.is_sparse() || (t.size(1) > 1 && t.stride(1) != 1))
    return 0;
  // Rows nest from the last spatial dim outwards to the batch dim; dims of size 1 have no say.
  std::vector<std::int64_t> outwards;
  for (std::int64_t d = t.dim() - 1; d >= 2; --d)
    outwards.push_back(d);
  outwards.push_back(0);
  std::int64_t rowStride = 0, expected = 0;
  for (std::int64_t d : outwards) {
    if (t.size(d) == 1)
      continue;
    if (rowStride == 0)
      rowStride = expected = t.stride(d);
    if (t.stride(d) != expected)
      return 0;
    expected *= t.size(d);
  }
  if (rowStride == 0)
    rowStride = t.size(1); // a single row
  return rowStride >= t.size(1) ? rowStride : 0;
}

at::Tensor reversedTimeIndex(const at::Tensor& lengths, std::int64_t steps) {
  at::Tensor t = at::arange(steps, lengths.options()).unsqueeze(1);
  at::Tensor len = lengths.unsqueeze(0);
  return at::where(t < len, len - 1 - t, t);
}

at::ScalarType onnxScalarType(std::int64_t onnxDtype) {
  std::optional<ir::DType> dtype = ir::dtypeFromOnnx(static_cast<int>(onnxDtype));
  if (!dtype)
    throw KernelError("unknown dtype code " + std::to_string(onnxDtype));
  Expected<at::ScalarType> type = scalarTypeOf(*dtype);
  if (!type)
    throw KernelError(type.error().message());
  return *type;
}

} // namespace cleave::runtime
