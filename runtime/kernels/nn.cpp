// runtime/kernels/nn.cpp - neural-network ONNX ops on ATen: Conv/ConvTranspose and pooling (auto_pad,
// asymmetric pads applied as explicit padding, ceil_mode, count_include_pad), normalizations,
// Gemm (transposes, alpha, beta), MatMul, Softmax/LogSoftmax (the pre-13 2-D coercion), Einsum.
// Convolutions, pooling and softmax ask the fast paths of the wing serving their operands' device
// first (runtime/engine/fast_paths.h) and compute on ATen where it declines.
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <string>

#include "runtime/engine/fast_paths.h"
#include "runtime/engine/forward_replay.h"
#include "runtime/kernels/helpers.h"
#include "runtime/engine/torch_compat.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

// Spatial padding of a window op: begin and end per spatial dim, from auto_pad or pads.
struct WindowPads {
  std::vector<std::int64_t> begin, end;
  bool symmetric() const { return begin == end; }
  std::vector<std::int64_t> atenOrder() const { // last dim first, (begin, end) pairs
    std::vector<std::int64_t> out;
    for (std::size_t d = begin.size(); d-- > 0;) {
      out.push_back(begin[d]);
      out.push_back(end[d]);
    }
    return out;
  }
};

WindowPads windowPads(KernelContext& c, const at::Tensor& x, const std::vector<std::int64_t>& kernel,
                      const std::vector<std::int64_t>& strides, const std::vector<std::int64_t>& dilations,
                      bool ceilMode = false) {
  std::size_t n = kernel.size();
  WindowPads pads{std::vector<std::int64_t>(n, 0), std::vector<std::int64_t>(n, 0)};
  std::string autoPad = c.stringAttr("auto_pad", "NOTSET");
  if (autoPad == "NOTSET") {
    std::vector<std::int64_t> given = c.intsAttr("pads");
    if (!given.empty()) {
      if (given.size() != 2 * n)
        throw KernelError("pads has " + std::to_string(given.size()) + " entries for " + std::to_string(n) + " spatial dims");
      for (std::size_t d = 0; d < n; ++d) {
        pads.begin[d] = given[d];
        pads.end[d] = given[d + n];
      }
    }
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (std::size_t d = 0; d < n; ++d) {
      std::int64_t in = x.size(static_cast<std::int64_t>(d) + 2);
      std::int64_t out = (in + strides[d] - 1) / strides[d];
      std::int64_t total = std::max<std::int64_t>(0, (out - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 - in);
      std::int64_t small = total / 2;
      pads.begin[d] = autoPad == "SAME_UPPER" ? small : total - small;
      pads.end[d] = total - pads.begin[d];
    }
  } else if (autoPad != "VALID") {
    throw KernelError("auto_pad '" + autoPad + "' is not supported");
  }
  (void)ceilMode;
  return pads;
}

std::vector<std::int64_t> orOnes(std::vector<std::int64_t> values, std::size_t n) {
  if (values.empty())
    values.assign(n, 1);
  return values;
}

Outputs conv(KernelContext& c) {
  return {convolution(c, c.input(0), c.input(1), c.has(2) ? c.input(2) : at::Tensor())};
}

// ConvTranspose's pads per spatial axis as (begin, end), from `pads`, or from `output_shape` /
// auto_pad SAME_* (total padding = full output - wanted output, split as ONNX says: SAME_UPPER puts
// the smaller half first, otherwise the larger; a negative total adds zero rows). `full` is the
// unpadded output length per axis.
std::vector<std::pair<std::int64_t, std::int64_t>> transposedPads(const KernelContext& c, const at::Tensor& x,
                                                                  const std::vector<std::int64_t>& full,
                                                                  const std::vector<std::int64_t>& strides) {
  std::size_t n = full.size();
  std::string autoPad = c.stringAttr("auto_pad", "NOTSET");
  std::vector<std::int64_t> wanted = c.intsAttr("output_shape");
  if (wanted.size() == n + 2)
    wanted.erase(wanted.begin(), wanted.begin() + 2);
  std::vector<std::pair<std::int64_t, std::int64_t>> pads(n, {0, 0});
  if (wanted.empty() && (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER"))
    for (std::size_t d = 0; d < n; ++d)
      wanted.push_back(x.size(2 + d) * strides[d]);
  if (wanted.empty()) {
    std::vector<std::int64_t> given = c.intsAttr("pads");
    for (std::size_t d = 0; d < n && given.size() == 2 * n; ++d)
      pads[d] = {given[d], given[d + n]};
    return pads;
  }
  if (wanted.size() != n)
    throw KernelError("output_shape must have one entry per spatial axis");
  for (std::size_t d = 0; d < n; ++d) {
    std::int64_t total = full[d] - wanted[d];
    std::int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2); // floor(total / 2)
    pads[d] = autoPad == "SAME_UPPER" ? std::make_pair(half, total - half) : std::make_pair(total - half, half);
  }
  return pads;
}

Outputs convTranspose(KernelContext& c) {
  return {transposedConvolution(c, c.input(0), c.input(1), c.has(2) ? c.input(2) : at::Tensor())};
}

// w as ATen reads it: the plain weight behind a stand-in of the executor's (a weight its wing holds
// only in its own layouts, FastPaths::plainWeight), made dense for this call; else w itself.
at::Tensor plainConvolutionWeight(const KernelContext& c, const at::Tensor& w) {
  if (!w.is_meta())
    return w;
  const FastPaths* fast = fastPathsFor(c.device());
  at::Tensor plain = fast ? fast->plainWeight(c, w) : at::Tensor();
  if (!plain.defined())
    throw KernelError("the convolution's weight has no data (a stand-in of another executor's)");
  return plain;
}

// at::convolution, the one entry point every convolution form reaches. torch's conv1d/2d/3d and
// conv_transpose1d/2d/3d are on autocast's lists and at::convolution is not on the CPU's, so under
// autocast (mixed precision) the operands are cast to its half type here, as those would be.
at::Tensor convolutionAsTorch(at::Tensor x, at::Tensor w, at::Tensor bias, at::IntArrayRef strides,
                              at::IntArrayRef padding, at::IntArrayRef dilations, bool transposed,
                              at::IntArrayRef outputPadding, std::int64_t groups) {
  if (std::optional<at::ScalarType> half = activeAutocast(x.device().type());
      half && at::isFloatingType(x.scalar_type())) {
    x = x.to(*half);
    w = w.to(*half);
    if (bias.defined())
      bias = bias.to(*half);
  }
  return at::convolution(x, w, bias, strides, padding, dilations, transposed, outputPadding, groups);
}

// ConvTranspose on ATen: its own padding where the pads are symmetric, else a crop of the
// unpadded output.
at::Tensor atenTransposedConvolution(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                                     const std::vector<std::int64_t>& strides,
                                     const std::vector<std::int64_t>& dilations,
                                     const std::vector<std::int64_t>& extra, std::int64_t groups,
                                     const std::vector<std::pair<std::int64_t, std::int64_t>>& pads, bool thenRelu) {
  const std::size_t n = pads.size();
  const std::vector<std::int64_t> zeros(n, 0);
  bool symmetric = std::all_of(pads.begin(), pads.end(), [](auto p) { return p.first == p.second && p.first >= 0; });
  if (symmetric) { // ATen pads itself
    std::vector<std::int64_t> padding(n);
    for (std::size_t d = 0; d < n; ++d)
      padding[d] = pads[d].first;
    at::Tensor y = convolutionAsTorch(x, w, bias, strides, padding, dilations, true, extra, groups);
    return thenRelu ? at::relu(y) : y;
  }
  at::Tensor y = convolutionAsTorch(x, w, at::Tensor(), strides, zeros, dilations, true, extra, groups);
  std::vector<std::int64_t> crop; // constant_pad_nd order: last axis first, negative crops
  for (std::size_t d = n; d-- > 0;) {
    crop.push_back(-pads[d].first);
    crop.push_back(-pads[d].second);
  }
  y = at::constant_pad_nd(y, crop, 0.0);
  if (bias.defined()) {
    std::vector<std::int64_t> shape(y.dim(), 1);
    shape[1] = bias.size(0);
    y = y + bias.reshape(shape);
  }
  return thenRelu ? at::relu(y) : y;
}

} // namespace

at::Tensor transposedConvolution(KernelContext& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                                 bool thenRelu) {
  std::size_t n = static_cast<std::size_t>(w.dim() - 2);
  std::vector<std::int64_t> strides = orOnes(c.intsAttr("strides"), n), dilations = orOnes(c.intsAttr("dilations"), n);
  std::vector<std::int64_t> outputPadding = c.intsAttr("output_padding"), extra(n, 0), full(n, 0);
  for (std::size_t d = 0; d < n; ++d) {
    extra[d] = d < outputPadding.size() ? outputPadding[d] : 0;
    full[d] = strides[d] * (x.size(2 + d) - 1) + extra[d] + (w.size(2 + d) - 1) * dilations[d] + 1;
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> pads = transposedPads(c, x, full, strides);
  std::int64_t groups = c.intAttr("group", 1);
  if (const FastPaths* fast = fastPathsFor(x.device()); fast && n == 2) {
    ConvolutionWindow window{strides, dilations, {}, {}, extra, groups};
    for (const auto& [begin, end] : pads) {
      window.padBegin.push_back(begin);
      window.padEnd.push_back(end);
    }
    if (at::Tensor y = fast->transposedConvolution(c, x, w, bias, window, thenRelu); y.defined())
      return y;
  }
  return atenTransposedConvolution(x, plainConvolutionWeight(c, w), bias, strides, dilations, extra, groups, pads,
                                   thenRelu);
}

namespace {

// MaxPool's Indices output: ATen's per-plane flat indices made flat over the whole input (N, C
// and the spatial axes, ONNX's convention), column-major within a plane with storage_order 1.
at::Tensor onnxPoolIndices(const at::Tensor& x, at::Tensor planeIndices, bool columnMajor) {
  std::int64_t planeSize = 1;
  for (std::int64_t d = 2; d < x.dim(); ++d)
    planeSize *= x.size(d);
  if (columnMajor && x.dim() == 4) {
    std::int64_t height = x.size(2), width = x.size(3);
    planeIndices = (planeIndices % width) * height + planeIndices.div(width, "floor");
  }
  std::vector<std::int64_t> planeShape(x.dim(), 1);
  planeShape[0] = x.size(0);
  planeShape[1] = x.size(1);
  at::Tensor planeStart = at::arange(x.size(0) * x.size(1), planeIndices.options()).reshape(planeShape) * planeSize;
  return planeIndices + planeStart;
}

Outputs maxPoolWithIndices(const KernelContext& c, const at::Tensor& x, const std::vector<std::int64_t>& kernel,
                           const std::vector<std::int64_t>& strides, const std::vector<std::int64_t>& padding,
                           const std::vector<std::int64_t>& dilations, bool ceil) {
  std::tuple<at::Tensor, at::Tensor> pooled;
  switch (kernel.size()) {
  case 1: {
    pooled = at::max_pool2d_with_indices(x.unsqueeze(2), {1, kernel[0]}, {1, strides[0]}, {0, padding[0]},
                                         {1, dilations[0]}, ceil);
    std::get<0>(pooled) = std::get<0>(pooled).squeeze(2);
    std::get<1>(pooled) = std::get<1>(pooled).squeeze(2);
    break;
  }
  case 2: pooled = at::max_pool2d_with_indices(x, kernel, strides, padding, dilations, ceil); break;
  case 3: pooled = at::max_pool3d_with_indices(x, kernel, strides, padding, dilations, ceil); break;
  default: throw KernelError("MaxPool over " + std::to_string(kernel.size()) + " spatial dims");
  }
  return {std::get<0>(pooled), onnxPoolIndices(x, std::get<1>(pooled), c.intAttr("storage_order", 0) == 1)};
}

// 8-bit inputs (opset 12) pool as float, which holds them exactly.
Outputs maxPool(KernelContext& c) {
  at::Tensor x = c.input(0);
  at::ScalarType type = x.scalar_type();
  bool narrowInteger = type == at::kByte || type == at::kChar;
  if (narrowInteger)
    x = x.to(at::kFloat);
  std::vector<std::int64_t> kernel = c.intsAttr("kernel_shape");
  std::size_t n = kernel.size();
  std::vector<std::int64_t> strides = orOnes(c.intsAttr("strides"), n), dilations = orOnes(c.intsAttr("dilations"), n);
  bool ceil = c.intAttr("ceil_mode", 0) != 0;
  WindowPads pads = windowPads(c, x, kernel, strides, dilations);
  std::vector<std::int64_t> padding = pads.begin;
  bool fits = pads.symmetric();
  for (std::size_t d = 0; d < n && fits; ++d)
    fits = padding[d] * 2 <= kernel[d]; // ATen's limit on implicit padding
  if (c.outputUsed(1)) {
    if (!fits)
      throw KernelError("the Indices output needs symmetric pads of at most half the kernel");
    Outputs pooled = maxPoolWithIndices(c, denseFromPrivateLayout(x), kernel, strides, padding, dilations, ceil);
    pooled[0] = pooled[0].to(type);
    return pooled;
  }
  const FastPaths* fast = fastPathsFor(x.device());
  if (fast && (n == 2 || n == 3)) { // the wing's pooling, in x's layout, any pads
    const PoolWindow window{PoolKind::Max, kernel, strides, dilations, pads.begin, pads.end, ceil};
    if (at::Tensor y = fast->pool(x, window, c.outputMayStayPrivate()); y.defined())
      return {narrowInteger ? y.to(type) : y};
  }
  x = denseFromPrivateLayout(x); // ATen's pooling reads no wing's private layout
  if (!fits) {
    x = at::constant_pad_nd(x, pads.atenOrder(), -std::numeric_limits<double>::infinity());
    padding.assign(n, 0);
  }
  at::Tensor y;
  switch (n) {
  case 1: y = at::max_pool1d(x, kernel, strides, padding, dilations, ceil); break;
  case 2: y = at::max_pool2d(x, kernel, strides, padding, dilations, ceil); break;
  case 3: y = at::max_pool3d(x, kernel, strides, padding, dilations, ceil); break;
  default: throw KernelError("MaxPool over " + std::to_string(n) + " spatial dims");
  }
  return {narrowInteger ? y.to(type) : y};
}

at::Tensor averagePool(const at::Tensor& x, const std::vector<std::int64_t>& kernel, const std::vector<std::int64_t>& strides,
                       const std::vector<std::int64_t>& padding, bool ceil, bool includePad) {
  switch (kernel.size()) {
  case 1: return at::avg_pool1d(x, kernel, strides, padding, ceil, includePad);
  case 2: return at::avg_pool2d(x, kernel, strides, padding, ceil, includePad);
  case 3: return at::avg_pool3d(x, kernel, strides, padding, ceil, includePad);
  default: throw KernelError("AveragePool over " + std::to_string(kernel.size()) + " spatial dims");
  }
}

// Sums of `x` over each window, dilated, as a convolution of each channel with ones (ATen's pooling
// has no dilation): pads are zeros; in ceil mode the last window may run past the padded input, as
// long as it starts inside the input or its begin pad (PyTorch's and ONNX's rule), and reads zeros
// there. [N, C, spatial...] in, [N, C, out...] out.
at::Tensor dilatedWindowSums(const at::Tensor& x, const std::vector<std::int64_t>& kernel,
                             const std::vector<std::int64_t>& strides, const std::vector<std::int64_t>& dilations,
                             const WindowPads& pads, bool ceil, double padValue = 0.0) {
  const std::size_t n = kernel.size();
  WindowPads padded = pads;
  for (std::size_t d = 0; d < n; ++d) {
    const std::int64_t size = x.size(static_cast<std::int64_t>(d) + 2), in = size + pads.begin[d] + pads.end[d],
                       span = (kernel[d] - 1) * dilations[d] + 1;
    std::int64_t out = (in - span) / strides[d] + 1;
    if (ceil) {
      out = (in - span + strides[d] - 1) / strides[d] + 1;
      if ((out - 1) * strides[d] >= size + pads.begin[d])
        --out;
    }
    padded.end[d] += std::max<std::int64_t>(0, (out - 1) * strides[d] + span - in);
  }
  // The begin and end pads hold padValue; what ceil mode adds past them holds zeros.
  at::Tensor input = at::constant_pad_nd(x, pads.atenOrder(), padValue);
  WindowPads extra{std::vector<std::int64_t>(n, 0), std::vector<std::int64_t>(n, 0)};
  for (std::size_t d = 0; d < n; ++d)
    extra.end[d] = padded.end[d] - pads.end[d];
  input = at::constant_pad_nd(input, extra.atenOrder(), 0.0);
  std::vector<std::int64_t> channels{x.size(0) * x.size(1), 1}, weightShape{1, 1};
  for (std::size_t d = 0; d < n; ++d) {
    channels.push_back(input.size(static_cast<std::int64_t>(d) + 2));
    weightShape.push_back(kernel[d]);
  }
  at::Tensor sums = at::convolution(input.reshape(channels), at::ones(weightShape, x.options()), at::Tensor(), strides,
                                    std::vector<std::int64_t>(n, 0), dilations, false, std::vector<std::int64_t>(n, 0), 1);
  std::vector<std::int64_t> shape{x.size(0), x.size(1)};
  for (std::size_t d = 0; d < n; ++d)
    shape.push_back(sums.size(static_cast<std::int64_t>(d) + 2));
  return sums.reshape(shape);
}

// AveragePool-19's dilated windows: their sums over the count of what each covers (real elements,
// or with count_include_pad the pads as well, never ceil mode's overhang).
at::Tensor dilatedAveragePool(const at::Tensor& x, const std::vector<std::int64_t>& kernel,
                              const std::vector<std::int64_t>& strides, const std::vector<std::int64_t>& dilations,
                              const WindowPads& pads, bool ceil, bool includePad) {
  at::Tensor sums = dilatedWindowSums(x, kernel, strides, dilations, pads, ceil);
  std::vector<std::int64_t> one(x.sizes().begin(), x.sizes().end());
  one[0] = one[1] = 1;
  at::Tensor counts = dilatedWindowSums(at::ones(one, x.options()), kernel, strides, dilations, pads, ceil, includePad ? 1.0 : 0.0);
  return sums / counts;
}

// RotaryEmbedding (opset 23), as its spec's reference computes it: X as [batch, sequence, heads,
// head] (a 4-D [batch, heads, sequence, head] transposed, or a 3-D [batch, sequence, width] split by
// num_heads); its first rotary_embedding_dim entries (all when 0) rotated pairwise, the pairs being
// the two halves or, interleaved, neighbours; cos and sin per position, looked up by position_ids
// when given ([max position, dim / 2]) or given per batch and position ([batch, sequence, dim / 2]).
// One kernel instead of the function body's ~12 ops.
Outputs rotaryEmbedding(KernelContext& c) {
  const at::Tensor& input = c.input(0);
  at::Tensor x;
  if (input.dim() == 4) {
    x = input.transpose(1, 2);
  } else {
    const std::int64_t heads = c.intAttr("num_heads", 0);
    if (input.dim() != 3 || heads <= 0 || input.size(2) % heads != 0)
      throw KernelError("RotaryEmbedding takes a 4-D input, or a 3-D one whose width num_heads divides");
    x = input.reshape({input.size(0), input.size(1), heads, input.size(2) / heads});
  }
  const std::int64_t head = x.size(3), given = c.intAttr("rotary_embedding_dim", 0), dim = given > 0 ? given : head;
  if (dim > head || dim % 2 != 0)
    throw KernelError("rotary_embedding_dim " + std::to_string(dim) + " does not fit a head of " + std::to_string(head));
  at::Tensor cos = c.input(1), sin = c.input(2);
  const bool interleaved = c.intAttr("interleaved", 0) != 0;
  if (cos.size(-1) != dim / 2 || sin.size(-1) != dim / 2)
    throw KernelError("the cos and sin caches' last dim is not rotary_embedding_dim / 2");
  if (x.scalar_type() == at::kFloat) { // one pass over the input's own layout
    const at::Tensor positions = c.has(3) ? c.input(3).to(at::kLong).contiguous() : at::Tensor();
    const at::Tensor rows = input.dim() == 4 ? input.contiguous() : x.contiguous();
    at::Tensor out = rotateRows(rows, input.dim() != 4, cos.to(at::kFloat).contiguous(), sin.to(at::kFloat).contiguous(),
                                positions, dim, interleaved);
    if (out.defined())
      return {input.dim() == 4 ? out : out.reshape(input.sizes())};
  }
  if (c.has(3)) {
    const at::Tensor ids = c.input(3).to(at::kLong);
    cos = cos.index_select(0, ids.reshape({-1})).reshape({ids.size(0), ids.size(1), -1});
    sin = sin.index_select(0, ids.reshape({-1})).reshape({ids.size(0), ids.size(1), -1});
  }
  cos = cos.unsqueeze(2).to(x.scalar_type());
  sin = sin.unsqueeze(2).to(x.scalar_type());
  at::Tensor rotary = x.narrow(3, 0, dim);
  at::Tensor first = interleaved ? rotary.slice(3, 0, dim, 2) : rotary.narrow(3, 0, dim / 2);
  at::Tensor second = interleaved ? rotary.slice(3, 1, dim, 2) : rotary.narrow(3, dim / 2, dim / 2);
  at::Tensor real = cos * first - sin * second, imaginary = sin * first + cos * second;
  at::Tensor rotated = interleaved ? at::stack({real, imaginary}, -1).reshape(rotary.sizes()) : at::cat({real, imaginary}, -1);
  at::Tensor out = dim < head ? at::cat({rotated, x.narrow(3, dim, head - dim)}, -1) : rotated;
  return {input.dim() == 4 ? out.transpose(1, 2).contiguous() : out.reshape(input.sizes())};
}

Outputs avgPool(KernelContext& c) {
  at::Tensor x = c.input(0);
  std::vector<std::int64_t> kernel = c.intsAttr("kernel_shape");
  std::size_t n = kernel.size();
  std::vector<std::int64_t> strides = orOnes(c.intsAttr("strides"), n), ones(n, 1);
  bool ceil = c.intAttr("ceil_mode", 0) != 0, includePad = c.intAttr("count_include_pad", 0) != 0;
  std::vector<std::int64_t> dilations = orOnes(c.intsAttr("dilations"), n);
  if (dilations != ones) // opset 19
    return {dilatedAveragePool(denseFromPrivateLayout(x), kernel, strides, dilations, windowPads(c, x, kernel, strides, dilations), ceil,
                               includePad)};
  WindowPads pads = windowPads(c, x, kernel, strides, ones);
  const FastPaths* fast = fastPathsFor(x.device());
  if (fast && (n == 2 || n == 3)) { // the wing's pooling, in x's layout, any pads
    const PoolWindow window{includePad ? PoolKind::AverageWithPadding : PoolKind::AverageWithoutPadding,
                            kernel, strides, ones, pads.begin, pads.end, ceil};
    if (at::Tensor y = fast->pool(x, window, false); y.defined())
      return {y};
  }
  bool fits = pads.symmetric();
  for (std::size_t d = 0; d < n && fits; ++d)
    fits = pads.begin[d] * 2 <= kernel[d];
  if (fits)
    return {averagePool(x, kernel, strides, pads.begin, ceil, includePad)};
  // Explicit padding: the sum over the window divided by the count of real (or all) elements.
  std::vector<std::int64_t> zero(n, 0);
  at::Tensor padded = at::constant_pad_nd(x, pads.atenOrder(), 0.0);
  at::Tensor sums = averagePool(padded, kernel, strides, zero, ceil, true);
  if (includePad)
    return {sums};
  at::Tensor mask = at::constant_pad_nd(at::ones_like(x), pads.atenOrder(), 0.0);
  return {sums / averagePool(mask, kernel, strides, zero, ceil, true)};
}

// sum[i] = the sum over `count` rows of rows[r * width + i], in row order. On x86-64, compiled for
// AVX-512, AVX2 and the base ISA and picked at load: the build targets the base ISA, whose 4-wide
// adds left it slower than oneDNN's pooling on EfficientNet-B0's largest maps (84 against 67 us).
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void sumRows(const float* __restrict rows, std::int64_t count, std::int64_t width, float* __restrict sum) {
  std::fill(sum, sum + width, 0.0f);
  for (std::int64_t r = 0; r < count; ++r)
    for (std::int64_t i = 0; i < width; ++i)
      sum[i] += rows[r * width + i];
}

constexpr std::int64_t kRowsPerChunk = 256;

// [N, chunks, C]: each batch entry's channels-last rows [rows, C] summed per chunk of
// kRowsPerChunk rows (the last may be shorter), chunks in parallel.
at::Tensor chunkSums(const at::Tensor& x, std::int64_t rows, std::int64_t chunks) {
  const std::int64_t batch = x.size(0), channels = x.size(1);
  at::Tensor partial = at::empty({batch, chunks, channels}, x.options());
  const float* in = x.data_ptr<float>();
  float* sums = partial.data_ptr<float>();
  at::parallel_for(0, batch * chunks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t n = task / chunks, first = (task % chunks) * kRowsPerChunk;
      const std::int64_t last = std::min(rows, first + kRowsPerChunk);
      sumRows(in + (n * rows + first) * channels, last - first, channels, sums + task * channels);
    }
  });
  return partial;
}

// out[n, c] = (the chunk sums of entry n added in chunk order) / rows.
void meanOfChunkSums(const at::Tensor& partial, std::int64_t rows, at::Tensor& out) {
  const std::int64_t batch = partial.size(0), chunks = partial.size(1), channels = partial.size(2);
  const float* sums = partial.data_ptr<float>();
  float* mean = out.data_ptr<float>();
  const float count = static_cast<float>(rows);
  for (std::int64_t n = 0; n < batch; ++n) {
    float* dst = mean + n * channels;
    std::copy(sums + n * chunks * channels, sums + (n * chunks + 1) * channels, dst);
    for (std::int64_t chunk = 1; chunk < chunks; ++chunk) {
      const float* src = sums + (n * chunks + chunk) * channels;
      for (std::int64_t ch = 0; ch < channels; ++ch)
        dst[ch] += src[ch];
    }
    for (std::int64_t ch = 0; ch < channels; ++ch)
      dst[ch] /= count;
  }
}
} // namespace

at::Tensor globalAverageChannelsLast(const at::Tensor& x) {
  if ((x.dim() != 4 && x.dim() != 5) || x.scalar_type() != at::kFloat || !x.device().is_cpu() ||
      x.requires_grad() || x.numel() == 0 ||
      !x.is_contiguous(x.dim() == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::ChannelsLast))
    return {};
  const std::int64_t rows = x.numel() / (x.size(0) * x.size(1));
  const at::Tensor partial = chunkSums(x, rows, (rows + kRowsPerChunk - 1) / kRowsPerChunk);
  std::vector<std::int64_t> outSizes{x.size(0), x.size(1)};
  outSizes.resize(static_cast<std::size_t>(x.dim()), 1);
  at::Tensor out = at::empty(outSizes, x.options());
  meanOfChunkSums(partial, rows, out);
  return out;
}

namespace {
std::vector<std::int64_t> spatialDims(const at::Tensor& x) {
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 2; d < x.dim(); ++d)
    dims.push_back(d);
  return dims;
}

// BatchNormalization's training mode (opset 14+): normalized by the batch's mean and (biased)
// variance over every axis but the channels, by ATen's batch_norm (its backward is torch's).
// The running statistics, in an executor that trains, update in place as torch's do
// (running_statistics.h); the optional outputs 1 and 2 follow ONNX's formula (the batch's biased
// variance, from the statistics as they came in).
Outputs batchNormTraining(KernelContext& c) {
  const at::Tensor x = denseFromPrivateLayout(c.input(0));
  const double momentum = c.floatAttr("momentum", 0.9f); // ONNX's: the running value's weight
  Outputs outputs(c.numOutputs());
  if (c.outputUsed(1) || c.outputUsed(2)) {
    c10::NoGradGuard noGrad; // ONNX trains nothing through the statistics
    const std::vector<std::int64_t> axes = [&] {
      std::vector<std::int64_t> all = spatialDims(x);
      all.insert(all.begin(), 0);
      return all;
    }();
    outputs[1] = c.input(3) * momentum + x.mean(axes) * (1 - momentum);
    outputs[2] = c.input(4) * momentum + x.var(axes, /*unbiased=*/false) * (1 - momentum);
  }
  const bool update = c.mayUpdateStatistic(3) && c.mayUpdateStatistic(4);
  outputs[0] = at::batch_norm(x, c.input(1), c.input(2), update ? c.input(3) : at::Tensor(),
                              update ? c.input(4) : at::Tensor(), /*training=*/true, 1.0 - momentum,
                              c.floatAttr("epsilon", 1e-5f), /*cudnn_enabled=*/true);
  return outputs;
}

// The wing's kernel where it takes x (over x when `inPlace`: the caller's to overwrite), else ATen's.
at::Tensor softmaxAlong(const at::Tensor& x, std::int64_t axis, bool logarithm, bool inPlace) {
  if (const FastPaths* fast = fastPathsFor(x.device()))
    if (at::Tensor y = fast->softmax(x, axis, logarithm, inPlace); y.defined())
      return y;
  return logarithm ? at::log_softmax(x, axis) : at::softmax(x, axis);
}

} // namespace

bool softmaxIsOverLastAxis(std::optional<std::int64_t> axis, std::int64_t opset, std::int64_t rank) {
  return normalizeAxis(axis.value_or(opset >= 13 ? -1 : 1), rank) == rank - 1;
}

at::Tensor onnxSoftmax(const at::Tensor& x, std::optional<std::int64_t> axis, std::int64_t opset, bool logarithm,
                       bool inPlace) {
  if (opset >= 13)
    return softmaxAlong(x, normalizeAxis(axis.value_or(-1), x.dim()), logarithm, inPlace);
  // Before opset 13: the input is coerced to 2-D at `axis` (default 1), normalized per row.
  // (A view of x: writing over it writes over x, which is as much the caller's to overwrite.)
  return softmaxAlong(flattenTo2d(x, axis.value_or(1)), 1, logarithm, inPlace).reshape(x.sizes());
}

namespace {
Outputs softmaxLike(KernelContext& c, bool logarithm) {
  const ir::Attribute* axis = c.graph().findAttribute(c.node(), "axis");
  return {onnxSoftmax(c.input(0), axis ? std::optional<std::int64_t>(axis->intValue) : std::nullopt, c.opset(),
                      logarithm, c.mayOverwrite(0))};
}

// A Conv node's window (strides, dilations, groups, pads at either end), in the form the wings'
// fast paths take, so that a convolution builds it once.
ConvolutionWindow convWindow(KernelContext& c, const at::Tensor& x, const at::Tensor& w) {
  std::size_t n = static_cast<std::size_t>(std::max<std::int64_t>(w.dim() - 2, 0));
  std::vector<std::int64_t> kernel(w.sizes().begin() + static_cast<std::ptrdiff_t>(w.dim() - n), w.sizes().end());
  ConvolutionWindow window;
  window.strides = orOnes(c.intsAttr("strides"), n);
  window.dilations = orOnes(c.intsAttr("dilations"), n);
  window.groups = c.intAttr("group", 1);
  WindowPads pads = windowPads(c, x, kernel, window.strides, window.dilations);
  window.padBegin = std::move(pads.begin);
  window.padEnd = std::move(pads.end);
  return window;
}

at::Tensor directConvolution(const FastPaths& fast, KernelContext& c, const at::Tensor& x, const at::Tensor& w,
                             const at::Tensor& bias, const ConvolutionWindow& window, const ConvolutionEpilogue& post,
                             const at::Tensor& residual, bool residualIsScratch, bool mayReturnPrivate);

// A 1-D convolution as a 2-D one over a single row ([N, C, L] read as [N, C, 1, L]) on the wing's
// fast path: oneDNN has no 1-D primitive, and ATen 1.13's 1-D convolution was 1.29x ONNX Runtime's time on a
// wav2letter-like stack. The output is [N, OC, L'] with the channels innermost, as a 2-D
// convolution's is channels-last; elementwise ops and the next convolution read it as it is. The
// weight's 4-D view is kept in the node's cache (source: the weight), so its packed primitive,
// which checks the weight's identity, is not rebuilt every run; the ATen path never reads that
// slot for a 1-D convolution.
at::Tensor convolutionOfOneRow(const FastPaths& fast, KernelContext& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                               const ConvolutionWindow& window, const ConvolutionEpilogue& post, const at::Tensor& residual,
                               bool residualIsScratch) {
  KernelCache* cache = c.cache();
  at::Tensor rowWeight;
  if (cache && cache->source.is_same(w) && cache->derived.defined() && cache->derived.dim() == 4) {
    rowWeight = cache->derived;
  } else {
    rowWeight = w.unsqueeze(2);
    if (cache) {
      cache->source = w;
      cache->derived = rowWeight;
    }
  }
  const ConvolutionWindow rows{{1, window.strides[0]}, {1, window.dilations[0]}, {0, window.padBegin[0]},
                               {0, window.padEnd[0]}, {}, window.groups};
  const at::Tensor y = directConvolution(fast, c, x.unsqueeze(2), rowWeight, bias, rows, post,
                                         residual.defined() ? residual.unsqueeze(2) : residual, residualIsScratch, false);
  return y.defined() ? y.squeeze(2) : y;
}

// The wing's convolution (its weight's derived forms kept in the node's state), or undefined where
// it does not take the operands. x and the residual may be in the wing's private layout; the
// output is only with `mayReturnPrivate`.
at::Tensor directConvolution(const FastPaths& fast, KernelContext& c, const at::Tensor& x, const at::Tensor& w,
                             const at::Tensor& bias, const ConvolutionWindow& window, const ConvolutionEpilogue& post,
                             const at::Tensor& residual, bool residualIsScratch, bool mayReturnPrivate) {
  if (w.dim() == 3 && x.dim() == 3 && (!residual.defined() || residual.dim() == 3))
    return convolutionOfOneRow(fast, c, x, w, bias, window, post, residual, residualIsScratch);
  if (w.dim() != 4 && w.dim() != 5)
    return {};
  // The input channels-last, as wings read it (an image's planes interleaved here, faster than the
  // copy a wing would make).
  const bool denseFloat = !inPrivateLayout(x) && x.scalar_type() == at::kFloat && x.device().is_cpu() &&
                          !x.requires_grad() && x.dim() == w.dim();
  return fast.convolution(c, denseFloat ? channelsLastDense(x) : x, w, bias, window, post, residual,
                          residualIsScratch, mayReturnPrivate);
}

// The convolution on ATen (x dense), its pads made symmetric where they are not.
at::Tensor atenConvolution(at::Tensor x, const at::Tensor& w, const at::Tensor& bias, const ConvolutionWindow& window) {
  const std::size_t n = window.strides.size();
  const WindowPads pads{window.padBegin, window.padEnd};
  std::vector<std::int64_t> padding = pads.begin;
  if (!pads.symmetric()) {
    x = at::constant_pad_nd(x, pads.atenOrder(), 0.0);
    padding.assign(n, 0);
  }
  return convolutionAsTorch(x, w, bias, window.strides, padding, window.dilations, false,
                            std::vector<std::int64_t>(n, 0), window.groups);
}

// Whether an inference normalization of `channels` channels with these parameters (scale, shift,
// mean, variance) folds into a multiplier and shift: float32 vectors, nothing recording autograd.
bool foldableNormalization(const std::vector<at::Tensor>& from, std::int64_t channels) {
  return std::all_of(from.begin(), from.end(), [&](const at::Tensor& t) {
    return t.dim() == 1 && t.size(0) == channels && t.scalar_type() == at::kFloat && !t.requires_grad();
  });
}

// m = scale / sqrt(variance + epsilon) and s = shift - mean * m (1-D), computed once while the same
// parameter tensors come back (kept in the node's cache).
std::pair<at::Tensor, at::Tensor> multiplierAndShift(KernelContext& c, const std::vector<at::Tensor>& from,
                                                     double epsilon) {
  KernelCache* cache = c.cache();
  if (cache && holdsFoldOf(*cache, from))
    return {cache->foldedWeight, cache->foldedBias};
  at::Tensor multiplier = (from[0] / at::sqrt(from[3] + epsilon)).contiguous();
  at::Tensor shift = (from[1] - from[2] * multiplier).contiguous();
  if (cache) {
    cache->foldedFrom = from;
    cache->foldedWeight = multiplier;
    cache->foldedBias = shift;
  }
  return {multiplier, shift};
}

} // namespace

at::Tensor batchNormInference(KernelContext& c, const std::vector<at::Tensor>& pieces, const std::vector<at::Tensor>& from,
                              double epsilon, bool thenRelu) {
  const std::int64_t channels = std::accumulate(pieces.begin(), pieces.end(), std::int64_t{0},
                                                [](std::int64_t sum, const at::Tensor& t) { return sum + (t.dim() >= 2 ? t.size(1) : 0); });
  if (foldableNormalization(from, channels)) {
    auto [multiplier, shift] = multiplierAndShift(c, from, epsilon);
    if (at::Tensor y = scaleShiftConcatenation(pieces, multiplier, shift, thenRelu); y.defined())
      return y;
  }
  // Autograd, other dtypes, layouts or shapes: the nodes one by one.
  at::Tensor x = pieces.size() == 1 ? pieces.front() : at::cat(pieces, 1);
  at::Tensor y = at::batch_norm(x, from[0], from[1], from[2], from[3], false, 0.0, epsilon, false);
  return thenRelu ? at::relu(y) : y;
}

// Why not at::einsum for these: ATen 1.13's einsum permutes, copies and calls its own bmm, where
// oneDNN reads the transposed views in place. MaxViT's 56 attention Einsums took 40 ms that way and
// 5.6 ms this way.
at::Tensor einsumAsBatchedMatmul(std::string equation, const at::Tensor& a, const at::Tensor& b) {
  equation.erase(std::remove(equation.begin(), equation.end(), ' '), equation.end());
  const std::size_t comma = equation.find(','), arrow = equation.find("->");
  if (comma == std::string::npos || arrow == std::string::npos || arrow < comma)
    return {};
  const std::string left = equation.substr(0, comma), right = equation.substr(comma + 1, arrow - comma - 1),
                    out = equation.substr(arrow + 2);
  const std::size_t rank = left.size();
  auto distinctLetters = [](const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)); }) &&
           std::set<char>(s.begin(), s.end()).size() == s.size();
  };
  if (rank < 2 || right.size() != rank || out.size() != rank || !distinctLetters(left) || !distinctLetters(right) ||
      !distinctLetters(out) || a.dim() != static_cast<std::int64_t>(rank) || b.dim() != static_cast<std::int64_t>(rank))
    return {};
  const std::size_t batch = rank - 2;
  if (left.compare(0, batch, out, 0, batch) != 0 || right.compare(0, batch, out, 0, batch) != 0)
    return {};
  for (std::size_t d = 0; d < batch; ++d)
    if (a.size(static_cast<std::int64_t>(d)) != b.size(static_cast<std::int64_t>(d)))
      return {};
  // The contracted letter is in both operands' last two and not in the output's.
  const char l0 = left[batch], l1 = left[batch + 1], r0 = right[batch], r1 = right[batch + 1];
  const char o0 = out[batch], o1 = out[batch + 1];
  char contracted = 0;
  for (char ch : {l0, l1})
    if ((ch == r0 || ch == r1) && ch != o0 && ch != o1)
      contracted = ch;
  if (contracted == 0)
    return {};
  const char rows = l0 == contracted ? l1 : l0, cols = r0 == contracted ? r1 : r0;
  if (rows == cols || !((o0 == rows && o1 == cols) || (o0 == cols && o1 == rows)))
    return {};
  const at::Tensor lhs = l1 == contracted ? a : a.transpose(-1, -2), rhs = r0 == contracted ? b : b.transpose(-1, -2);
  if (lhs.size(-1) != rhs.size(-2))
    return {};
  const at::Tensor product = batchedMatmul(lhs, rhs);
  return o0 == rows ? product : product.transpose(-1, -2);
}

at::Tensor fusedConvolution(KernelContext& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                            const ConvolutionEpilogue& post, const at::Tensor& residual, bool residualIsScratch) {
  const ConvolutionWindow window = convWindow(c, x, w);
  const FastPaths* fast = fastPathsFor(x.device());
  at::Tensor y;
  if (fast)
    y = directConvolution(*fast, c, x, w, bias, window, post, residual, residualIsScratch, c.outputMayStayPrivate());
  if (y.defined())
    return y;
  const at::Tensor denseX = denseFromPrivateLayout(x); // ATen reads no wing's private layout
  const bool withPost = post.addResidual || post.activation != ConvolutionEpilogue::Activation::None;
  if (fast && withPost) // e.g. a residual that broadcasts: the convolution alone may still go direct
    y = directConvolution(*fast, c, denseX, w, bias, window, {}, at::Tensor(), false, false);
  if (!y.defined())
    y = atenConvolution(denseX, plainConvolutionWeight(c, w), bias, window);
  if (!withPost)
    return y;
  if (post.addResidual)
    y = y + denseFromPrivateLayout(residual);
  using A = ConvolutionEpilogue::Activation;
  switch (post.activation) {
  case A::None: return y;
  case A::Relu: return at::relu(y);
  case A::Clip: return at::clamp(y, post.clipLow, post.clipHigh);
  case A::HardSwish: return at::hardswish(y);
  case A::HardSigmoid: return at::clamp(y * post.alpha + post.beta, 0.0, 1.0);
  case A::Swish: return y * at::sigmoid(y);
  }
  return y;
}

at::Tensor convolution(KernelContext& c, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  return fusedConvolution(c, x, w, bias, {}, at::Tensor());
}

void registerNnKernels(KernelTable& t) {
  // Private layouts: the wing's, which its convolutions and max pooling read (Layouts).
  t.add("Conv", conv, Layouts::DenseOrPrivate);
  t.add("ConvTranspose", convTranspose);
  t.add("MaxPool", maxPool, Layouts::DenseOrPrivate);
  t.add("AveragePool", avgPool);
  t.add("LpPool", [](KernelContext& c) -> Outputs { // (sum over the window of |x|^p)^(1/p)
    const at::Tensor& x = c.input(0);
    std::vector<std::int64_t> kernel = c.intsAttr("kernel_shape");
    std::vector<std::int64_t> strides = orOnes(c.intsAttr("strides"), kernel.size()),
                              dilations = orOnes(c.intsAttr("dilations"), kernel.size());
    const double p = static_cast<double>(c.intAttr("p", 2));
    at::Tensor sums = dilatedWindowSums(x.abs().pow(p), kernel, strides, dilations,
                                        windowPads(c, x, kernel, strides, dilations), c.intAttr("ceil_mode", 0) != 0);
    return {sums.pow(1.0 / p)};
  });
  t.add("Col2Im", [](KernelContext& c) -> Outputs { // torch.nn.Fold, 2-D images (ATen's col2im)
    std::vector<std::int64_t> image = c.ints(1), block = c.ints(2);
    if (image.size() != 2 || block.size() != 2)
      throw KernelError("Col2Im over " + std::to_string(image.size()) + " spatial dims (ATen's col2im folds 2)");
    std::vector<std::int64_t> pads = c.intsAttr("pads", {0, 0, 0, 0});
    if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3])
      throw KernelError("Col2Im with different begin and end pads");
    return {at::col2im(c.input(0), image, block, orOnes(c.intsAttr("dilations"), 2), {pads[0], pads[1]},
                       orOnes(c.intsAttr("strides"), 2))};
  }, hostOperands({1, 2}));
  t.add("LpNormalization", [](KernelContext& c) -> Outputs { // x / its Lp norm along axis; 0 where that is 0
    const at::Tensor& x = c.input(0);
    at::Tensor norm = at::linalg_vector_norm(x, static_cast<double>(c.intAttr("p", 2)),
                                             {normalizeAxis(c.intAttr("axis", -1), x.dim())}, /*keepdim=*/true);
    return {at::where(norm == 0, at::zeros_like(x), x / norm)};
  });
  t.add("GlobalAveragePool", [](KernelContext& c) -> Outputs {
    const at::Tensor& x = c.input(0);
    if (at::Tensor y = globalAverageChannelsLast(x); y.defined())
      return {y};
    if (const FastPaths* fast = fastPathsFor(x.device()); fast && x.dim() == 4) { // one window over the plane
      const PoolWindow window{PoolKind::AverageWithoutPadding, {x.size(2), x.size(3)}, {1, 1}, {1, 1}, {0, 0}, {0, 0},
                              false};
      if (at::Tensor y = fast->pool(x, window, false); y.defined())
        return {y};
    }
    return {x.mean(spatialDims(x), true)};
  });
  t.add("GlobalMaxPool", [](KernelContext& c) -> Outputs { return {c.input(0).amax(spatialDims(c.input(0)), true)}; });
  t.add("BatchNormalization", [](KernelContext& c) -> Outputs {
    if (c.intAttr("training_mode", 0) != 0 && !evaluatingForward())
      return batchNormTraining(c);
    if (c.numOutputs() > 1) // a training-mode export under held-out evaluation: statistics as they are
      return {batchNormInference(c, {c.input(0)}, {c.input(1), c.input(2), c.input(3), c.input(4)},
                                 c.floatAttr("epsilon", 1e-5f), false),
              c.input(3), c.input(4)};
    return {batchNormInference(c, {c.input(0)}, {c.input(1), c.input(2), c.input(3), c.input(4)},
                               c.floatAttr("epsilon", 1e-5f), false)};
  });
  t.add("InstanceNormalization", [](KernelContext& c) -> Outputs {
    return {at::instance_norm(c.input(0), c.input(1), c.input(2), {}, {}, true, 0.0, c.floatAttr("epsilon", 1e-5f), false)};
  });
  t.add("LayerNormalization", [](KernelContext& c) -> Outputs {
    const at::Tensor& x = c.input(0);
    std::int64_t axis = normalizeAxis(c.intAttr("axis", -1), x.dim());
    std::vector<std::int64_t> shape(x.sizes().begin() + axis, x.sizes().end());
    at::Tensor scale = c.input(1).expand(shape), bias = c.has(2) ? c.input(2).expand(shape) : at::Tensor();
    // The statistics unread: torch's entry point, which autocast lists (float32 on CUDA).
    if (!c.outputUsed(1) && !c.outputUsed(2))
      return {at::layer_norm(x, shape, scale.contiguous(), bias.defined() ? bias.contiguous() : bias,
                             c.floatAttr("epsilon", 1e-5f))};
    auto [y, mean, rstd] = at::native_layer_norm(x, shape, scale.contiguous(), bias.defined() ? bias.contiguous() : bias,
                                                 c.floatAttr("epsilon", 1e-5f));
    return {y, mean, rstd};
  });
  t.add("RMSNormalization", [](KernelContext& c) -> Outputs { // opset 23
    const at::Tensor& x = c.input(0);
    std::int64_t axis = normalizeAxis(c.intAttr("axis", -1), x.dim());
    std::vector<std::int64_t> axes;
    for (std::int64_t d = axis; d < x.dim(); ++d)
      axes.push_back(d);
    // Stage one (the mean of squares and the division) in stash_type's precision, as the
    // function body casts; the scale multiplies in X's type.
    std::optional<ir::DType> stash = ir::dtypeFromOnnx(static_cast<int>(c.intAttr("stash_type", 1)));
    Expected<at::ScalarType> stashType = scalarTypeOf(stash.value_or(ir::DType::Undefined));
    if (!stashType)
      throw KernelError("unsupported stash_type " + std::to_string(c.intAttr("stash_type", 1)));
    const float epsilon = c.floatAttr("epsilon", 1e-5f);
    if (x.scalar_type() == at::kFloat && *stashType == at::kFloat) { // one pass per row
      std::vector<std::int64_t> shape(x.sizes().begin() + axis, x.sizes().end());
      if (at::Tensor y = rmsNormalizeRows(x.contiguous(), c.input(1).expand(shape).contiguous(), epsilon); y.defined())
        return {y};
    }
    at::Tensor wide = x.to(*stashType);
    at::Tensor meanSquare = wide.square().mean(axes, /*keepdim=*/true);
    at::Tensor normalized = (wide * at::rsqrt(meanSquare + epsilon)).to(x.scalar_type());
    return {normalized * c.input(1)};
  });
  t.add("RotaryEmbedding", rotaryEmbedding); // opset 23
  t.add("Gemm", [](KernelContext& c) -> Outputs {
    at::Tensor a = c.input(0);
    if (c.intAttr("transA", 0))
      a = a.t();
    double alpha = c.floatAttr("alpha", 1.0f), beta = c.floatAttr("beta", 1.0f);
    at::Tensor bias = c.has(2) && beta != 0.0 ? c.input(2) : at::Tensor();
    // torch.nn.Linear's export: Gemm(x, W, b, transB=1) with a 1-D bias and unit scales, the
    // only form whose weight the device wing may hold alone (productWeight() is then undefined).
    if (alpha == 1.0 && (!bias.defined() || (beta == 1.0 && bias.dim() == 1))) {
      at::Tensor weight = productWeight(c, 1);
      return {weight.defined() ? linear(c, a, weight, c.intAttr("transB", 0) != 0, bias) : matmul(c, a, weight, bias)};
    }
    at::Tensor b = c.intAttr("transB", 0) ? c.input(1).t() : c.input(1);
    if (bias.defined())
      return {at::addmm(bias, a, b, beta, alpha)};
    at::Tensor product = at::mm(a, b);
    return {alpha == 1.0 ? product : product * alpha};
  });
  t.add("MatMul", [](KernelContext& c) -> Outputs { return {matmul(c, c.input(0), productWeight(c, 1))}; });
  t.add("Softmax", [](KernelContext& c) -> Outputs { return softmaxLike(c, false); });
  t.add("LogSoftmax", [](KernelContext& c) -> Outputs { return softmaxLike(c, true); });
  t.add("Hardmax", [](KernelContext& c) -> Outputs { // one-hot of the first maximum along the axis
    const at::Tensor& x = c.input(0);
    auto oneHot = [](const at::Tensor& t, std::int64_t axis) {
      return at::zeros_like(t).scatter_(axis, t.argmax(axis, /*keepdim=*/true), 1);
    };
    if (c.opset() >= 13)
      return {oneHot(x, normalizeAxis(c.intAttr("axis", -1), x.dim()))};
    return {oneHot(flattenTo2d(x, c.intAttr("axis", 1)), 1).reshape(x.sizes())};
  });
  t.add("Det", [](KernelContext& c) -> Outputs { return {at::linalg_det(c.input(0))}; });
  t.add("Einsum", [](KernelContext& c) -> Outputs {
    const std::string equation = c.stringAttr("equation", "");
    if (c.numInputs() == 2) {
      at::Tensor product = einsumAsBatchedMatmul(equation, c.input(0), c.input(1));
      if (product.defined())
        return {product};
    }
    std::vector<at::Tensor> operands;
    for (std::size_t i = 0; i < c.numInputs(); ++i)
      operands.push_back(c.input(i));
    return {at::einsum(equation, operands)};
  });
}

} // namespace cleave::runtime
