// runtime/kernels/shape.cpp - ONNX ops that move data without arithmetic: Constant, Shape, Reshape
// (0 copies a dim unless allowzero, -1 infers), Transpose, Flatten, Squeeze/Unsqueeze (axes as an
// attribute before opset 13, an operand from 13), Concat, Split, Slice (negative steps, clamped
// bounds), Gather/GatherElements (negative indices), Expand (bidirectional broadcast), Tile,
// Pad, Range, Trilu, ConstantOfShape, NonZero.
#include <ATen/InferSize.h>

#include <algorithm>
#include <limits>

#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

at::Tensor longTensor(const std::vector<std::int64_t>& values) {
  return at::tensor(at::ArrayRef<std::int64_t>(values), at::TensorOptions().dtype(at::kLong));
}

// Axes from the attribute (old opsets) or the operand at `operand` (new ones).
std::vector<std::int64_t> axesOf(KernelContext& c, std::size_t operand, std::int64_t operandSince) {
  if (c.opset() >= operandSince)
    return c.has(operand) ? c.ints(operand) : std::vector<std::int64_t>{};
  return c.intsAttr("axes");
}

Outputs reshape(KernelContext& c) {
  const at::Tensor& data = c.input(0);
  return {data.reshape(reshapeTarget(data.sizes(), c.ints(1), c.intAttr("allowzero", 0) != 0))};
}

Outputs slice(KernelContext& c) {
  at::Tensor data = c.input(0);
  std::vector<std::int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = c.intsAttr("starts");
    ends = c.intsAttr("ends");
    axes = c.intsAttr("axes");
  } else {
    starts = c.ints(1);
    ends = c.ints(2);
    if (c.has(3))
      axes = c.ints(3);
    if (c.has(4))
      steps = c.ints(4);
  }
  if (axes.empty())
    for (std::size_t i = 0; i < starts.size(); ++i)
      axes.push_back(static_cast<std::int64_t>(i));
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    throw KernelError("starts, ends, axes and steps differ in length");
  for (std::size_t i = 0; i < starts.size(); ++i) {
    std::int64_t axis = normalizeAxis(axes[i], data.dim()), size = data.size(axis), step = steps[i];
    if (step == 0)
      throw KernelError("slice step 0");
    auto clampIndex = [&](std::int64_t value, std::int64_t low, std::int64_t high) {
      if (value < 0)
        value += size;
      return std::clamp(value, low, high);
    };
    if (step > 0) {
      std::int64_t start = clampIndex(starts[i], 0, size), end = clampIndex(ends[i], 0, size);
      data = data.slice(axis, start, std::max(start, end), step);
    } else {
      if (size == 0)
        continue;
      std::int64_t start = clampIndex(starts[i], 0, size - 1), end = clampIndex(ends[i], -1, size - 1);
      std::vector<std::int64_t> picked;
      for (std::int64_t k = start; k > end; k += step)
        picked.push_back(k);
      data = data.index_select(axis, longTensor(picked).to(data.device()));
    }
  }
  return {data};
}

Outputs gather(KernelContext& c) {
  const at::Tensor& data = c.input(0);
  std::int64_t axis = normalizeAxis(c.intAttr("axis", 0), data.dim());
  at::Tensor indices = fixNegativeIndices(c.input(1), data.size(axis));
  std::vector<std::int64_t> shape(data.sizes().begin(), data.sizes().begin() + axis);
  for (std::int64_t d : indices.sizes())
    shape.push_back(d);
  for (std::int64_t d = axis + 1; d < data.dim(); ++d)
    shape.push_back(data.size(d));
  return {data.index_select(axis, indices.flatten()).reshape(shape)};
}

// Wrap padding (Pad-19): position i of each padded axis reads (i - before) mod n; negative pads crop.
at::Tensor wrapPad(const at::Tensor& data, const std::vector<std::int64_t>& begin, const std::vector<std::int64_t>& end) {
  at::Tensor result = data;
  for (std::int64_t a = 0; a < data.dim(); ++a) {
    const std::int64_t n = result.size(a), before = begin[static_cast<std::size_t>(a)],
                       after = end[static_cast<std::size_t>(a)], length = n + before + after;
    if (before == 0 && after == 0)
      continue;
    if (n == 0 || length < 0)
      throw KernelError("cannot wrap-pad an axis of " + std::to_string(n) + " to " + std::to_string(length));
    at::Tensor positions = at::arange(length, at::TensorOptions().dtype(at::kLong).device(data.device()));
    result = result.index_select(a, at::remainder(positions - before, n));
  }
  return result;
}

// Edge or reflect padding of one axis as a gather, for every rank and dtype: position i of the
// padded axis reads clamp(i) (edge) or numpy's reflection of i (reflect, period 2 (n - 1)); a
// negative pad crops.
at::Tensor padAxis(const at::Tensor& x, std::int64_t axis, std::int64_t before, std::int64_t after, bool reflect) {
  std::int64_t n = x.size(axis);
  if (before == 0 && after == 0)
    return x;
  if (n == 0)
    throw KernelError("cannot edge- or reflect-pad an empty axis");
  std::vector<std::int64_t> index;
  for (std::int64_t i = -before; i < n + after; ++i) {
    std::int64_t j = i;
    if (reflect && n > 1) {
      std::int64_t period = 2 * (n - 1);
      j = ((j % period) + period) % period;
      j = j >= n ? period - j : j;
    } else {
      j = std::clamp<std::int64_t>(j, 0, n - 1);
    }
    index.push_back(j);
  }
  return x.index_select(axis, at::tensor(index, at::kLong).to(x.device()));
}

Outputs pad(KernelContext& c) {
  const at::Tensor& data = c.input(0);
  std::string mode = c.stringAttr("mode", "constant");
  std::vector<std::int64_t> pads = c.opset() < 11 ? c.intsAttr("pads") : c.ints(1);
  double value = c.opset() < 11 ? c.floatAttr("value", 0.0f) : (c.has(2) ? c.input(2).item<double>() : 0.0);
  std::int64_t rank = data.dim();
  std::vector<std::int64_t> axes;
  if (c.opset() >= 18 && c.has(3))
    axes = c.ints(3);
  else
    for (std::int64_t a = 0; a < rank; ++a)
      axes.push_back(a);
  if (pads.size() != 2 * axes.size())
    throw KernelError("pads has " + std::to_string(pads.size()) + " entries for " + std::to_string(axes.size()) + " axes");
  std::vector<std::int64_t> begin(static_cast<std::size_t>(rank), 0), end(static_cast<std::size_t>(rank), 0);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    std::int64_t axis = normalizeAxis(axes[i], rank);
    begin[static_cast<std::size_t>(axis)] = pads[i];
    end[static_cast<std::size_t>(axis)] = pads[i + axes.size()];
  }
  std::vector<std::int64_t> atenPads; // last dimension first: (begin, end) pairs
  for (std::int64_t a = rank - 1; a >= 0; --a) {
    atenPads.push_back(begin[static_cast<std::size_t>(a)]);
    atenPads.push_back(end[static_cast<std::size_t>(a)]);
  }
  if (mode == "constant")
    return {at::constant_pad_nd(data, atenPads, value)};
  if (mode == "wrap") // opset 19: as if the data were a torus; a pad may exceed the axis (modular gather)
    return {wrapPad(data, begin, end)};
  if (mode != "edge" && mode != "reflect")
    throw KernelError("unknown mode '" + mode + "'");
  at::Tensor result = data;
  for (std::int64_t a = 0; a < rank; ++a)
    result = padAxis(result, a, begin[static_cast<std::size_t>(a)], end[static_cast<std::size_t>(a)], mode == "reflect");
  return {result};
}
} // namespace

void registerShapeKernels(KernelTable& t) {
  t.add("EyeLike", [](KernelContext& c) -> Outputs {
    const at::Tensor& x = c.input(0);
    at::ScalarType type = c.intAttr("dtype", 0) ? onnxScalarType(c.intAttr("dtype", 0)) : x.scalar_type();
    std::int64_t rows = x.size(0), cols = x.size(1), k = c.intAttr("k", 0);
    at::Tensor out = at::zeros({rows, cols}, x.options().dtype(type));
    if (k < cols && -k < rows)
      out.diagonal(k).fill_(1);
    return {out};
  });
  // DepthToSpace / SpaceToDepth: [N, C, H, W] <-> [N, C / b^2, H * b, W * b]; DCR (depth-column-row,
  // the default) or CRD order of the moved channels.
  t.add("DepthToSpace", [](KernelContext& c) -> Outputs {
    const at::Tensor& x = c.input(0);
    std::int64_t b = c.intAttr("blocksize", 1), n = x.size(0), ch = x.size(1), h = x.size(2), w = x.size(3);
    if (c.stringAttr("mode", "DCR") == "CRD")
      return {x.reshape({n, ch / (b * b), b, b, h, w}).permute({0, 1, 4, 2, 5, 3}).reshape({n, ch / (b * b), h * b, w * b})};
    return {x.reshape({n, b, b, ch / (b * b), h, w}).permute({0, 3, 4, 1, 5, 2}).reshape({n, ch / (b * b), h * b, w * b})};
  });
  t.add("SpaceToDepth", [](KernelContext& c) -> Outputs {
    const at::Tensor& x = c.input(0);
    std::int64_t b = c.intAttr("blocksize", 1), n = x.size(0), ch = x.size(1), h = x.size(2), w = x.size(3);
    at::Tensor blocks = x.reshape({n, ch, h / b, b, w / b, b});
    // DCR (the default): the block's offsets before the channel; CRD (opset 28): after it.
    blocks = c.stringAttr("mode", "DCR") == "CRD" ? blocks.permute({0, 1, 3, 5, 2, 4}) : blocks.permute({0, 3, 5, 1, 2, 4});
    return {blocks.reshape({n, ch * b * b, h / b, w / b})};
  });
  t.add("Constant", [](KernelContext& c) -> Outputs {
    if (at::Tensor value = c.tensorAttr("value"); value.defined())
      return {value};
    if (const ir::Attribute* a = c.attribute("value_float"))
      return {at::scalar_tensor(a->floatValue, at::TensorOptions().dtype(at::kFloat))};
    if (const ir::Attribute* a = c.attribute("value_int"))
      return {at::scalar_tensor(a->intValue, at::TensorOptions().dtype(at::kLong))};
    if (const ir::Attribute* a = c.attribute("value_floats"))
      return {at::tensor(at::ArrayRef<float>(c.floatsAttr("value_floats")), at::TensorOptions().dtype(at::kFloat))};
    if (const ir::Attribute* a = c.attribute("value_ints"))
      return {longTensor(a->ints)};
    throw KernelError("no supported value attribute");
  });
  t.add("Shape", [](KernelContext& c) -> Outputs {
    std::vector<std::int64_t> dims = c.input(0).sizes().vec();
    std::int64_t rank = static_cast<std::int64_t>(dims.size());
    std::int64_t start = c.intAttr("start", 0), end = c.intAttr("end", rank);
    start = std::clamp(start < 0 ? start + rank : start, std::int64_t{0}, rank);
    end = std::clamp(end < 0 ? end + rank : end, std::int64_t{0}, rank);
    return {longTensor(std::vector<std::int64_t>(dims.begin() + start, dims.begin() + std::max(start, end)))};
  }, OperandMemory{0, operandBits({0})});
  t.add("Size", [](KernelContext& c) -> Outputs {
    return {at::scalar_tensor(c.input(0).numel(), at::TensorOptions().dtype(at::kLong))};
  }, OperandMemory{0, operandBits({0})});
  t.add("Reshape", reshape, hostOperands({1}));
  t.add("Transpose", [](KernelContext& c) -> Outputs {
    const at::Tensor& x = c.input(0);
    std::vector<std::int64_t> perm = c.intsAttr("perm");
    if (perm.empty())
      for (std::int64_t d = x.dim() - 1; d >= 0; --d)
        perm.push_back(d);
    return {x.permute(perm)};
  });
  t.add("Flatten", [](KernelContext& c) -> Outputs { return {flattenTo2d(c.input(0), c.intAttr("axis", 1))}; });
  t.add("Squeeze", [](KernelContext& c) -> Outputs {
    at::Tensor x = c.input(0);
    std::vector<std::int64_t> axes = axesOf(c, 1, 13);
    if (axes.empty())
      return {x.squeeze()};
    for (std::int64_t& a : axes)
      a = normalizeAxis(a, x.dim());
    std::sort(axes.rbegin(), axes.rend());
    for (std::int64_t a : axes) {
      if (x.size(a) != 1)
        throw KernelError("cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(x.size(a)));
      x = x.squeeze(a);
    }
    return {x};
  }, hostOperands({1}));
  t.add("Unsqueeze", [](KernelContext& c) -> Outputs {
    at::Tensor x = c.input(0);
    std::vector<std::int64_t> axes = axesOf(c, 1, 13);
    std::int64_t rank = x.dim() + static_cast<std::int64_t>(axes.size());
    for (std::int64_t& a : axes)
      a = normalizeAxis(a, rank);
    std::sort(axes.begin(), axes.end());
    for (std::int64_t a : axes)
      x = x.unsqueeze(a);
    return {x};
  }, hostOperands({1}));
  t.add("Concat", [](KernelContext& c) -> Outputs {
    std::vector<at::Tensor> parts;
    for (std::size_t i = 0; i < c.numInputs(); ++i)
      parts.push_back(c.input(i));
    std::int64_t axis = normalizeAxis(c.intAttr("axis", 0), parts.front().dim());
    return {at::cat(parts, axis)};
  });
  t.add("Split", [](KernelContext& c) -> Outputs {
    const at::Tensor& x = c.input(0);
    std::int64_t axis = normalizeAxis(c.intAttr("axis", 0), x.dim());
    std::vector<std::int64_t> sizes = c.opset() >= 13 ? (c.has(1) ? c.ints(1) : std::vector<std::int64_t>{})
                                                        : c.intsAttr("split");
    if (sizes.empty()) {
      std::int64_t parts = static_cast<std::int64_t>(c.numOutputs()), size = x.size(axis);
      std::int64_t chunk = (size + parts - 1) / parts;
      for (std::int64_t left = size; left > 0; left -= chunk)
        sizes.push_back(std::min(chunk, left));
    }
    return at::split_with_sizes(x, sizes, axis);
  }, hostOperands({1}));
  t.add("Slice", slice, hostOperands({1, 2, 3, 4}));
  t.add("Gather", gather);
  t.add("GatherElements", [](KernelContext& c) -> Outputs {
    const at::Tensor& data = c.input(0);
    std::int64_t axis = normalizeAxis(c.intAttr("axis", 0), data.dim());
    return {at::gather(data, axis, fixNegativeIndices(c.input(1), data.size(axis)))};
  });
  t.add("Expand", [](KernelContext& c) -> Outputs {
    const at::Tensor& x = c.input(0);
    std::vector<std::int64_t> shape = at::infer_size(x.sizes(), c.ints(1));
    return {x.expand(shape)};
  }, hostOperands({1}));
  t.add("Tile", [](KernelContext& c) -> Outputs { return {c.input(0).repeat(c.ints(1))}; }, hostOperands({1}));
  t.add("Pad", pad, hostOperands({1, 2, 3}));
  t.add("Range", [](KernelContext& c) -> Outputs {
    const at::Tensor& start = c.input(0);
    return {at::arange(start.item(), c.input(1).item(), c.input(2).item(),
                      at::TensorOptions().dtype(start.scalar_type()).device(c.device()))};
  }, hostOperands({0, 1, 2}));
  t.add("Trilu", [](KernelContext& c) -> Outputs {
    std::int64_t k = c.has(1) ? c.input(1).item<std::int64_t>() : 0;
    return {c.intAttr("upper", 1) ? at::triu(c.input(0), k) : at::tril(c.input(0), k)};
  }, hostOperands({1}));
  t.add("ConstantOfShape", [](KernelContext& c) -> Outputs {
    at::Tensor value = c.tensorAttr("value");
    if (!value.defined())
      value = at::zeros({1}, at::TensorOptions().dtype(at::kFloat));
    return {at::full(c.ints(0), value.flatten()[0].item(),
                    at::TensorOptions().dtype(value.scalar_type()).device(c.device()))};
  }, hostOperands({0}));
  t.add("NonZero", [](KernelContext& c) -> Outputs { return {at::nonzero(c.input(0)).t().contiguous()}; });
}

std::vector<std::int64_t> reshapeTarget(at::IntArrayRef sizes, std::vector<std::int64_t> shape, bool allowZero) {
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (shape[i] == 0 && !allowZero) {
      if (i >= sizes.size())
        throw KernelError("shape entry " + std::to_string(i) + " is 0 but the input has rank " + std::to_string(sizes.size()));
      shape[i] = sizes[i];
    }
  return at::infer_size(shape, c10::multiply_integers(sizes));
}

} // namespace cleave::runtime
