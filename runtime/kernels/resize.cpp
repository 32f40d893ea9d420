// runtime/kernels/resize.cpp - ONNX Resize (opsets 11-18), axis by axis.
//
// Every mode ONNX defines is separable, so the kernel resizes one axis at a time: for each output
// position it maps the coordinate back to the input (coordinate_transformation_mode), picks the
// taps (nearest: 1 with nearest_mode's rounding; linear: 2; cubic: 4 with cubic_coeff_a and
// exclude_outside) with their weights, and sums the gathered slices. Taps beyond an edge take the
// edge value, as ONNX's reference does; tf_crop_and_resize puts extrapolation_value where the
// mapped coordinate falls outside the input. Output sizes come from `sizes` (with opset 18's
// keep_aspect_ratio_policy) or from floor(input * scales); opset 18's `axes` limits both to some
// axes. Not supported: antialias (refused, naming it).
// Cost: O(output elements x taps) per resized axis, plus O(output length x taps) to plan it.
//
// That reference path computes in double, one gathered slice per tap: about 20 ns per output
// element. The common case (a float32 image or volume whose batch and channels stay, linearly
// resized with half_pixel, pytorch_half_pixel or align_corners coordinates, as PyTorch exports
// interpolate) runs instead as ATen's upsample_{linear1d,bilinear2d,trilinear3d}: same
// coordinates and taps, float arithmetic, vectorized over channels-last values and threaded.
// Nearest mode computes in the input's own dtype (one tap of weight 1: exact either way), and
// enlarging by powers of two with asymmetric, floor coordinates (FPN's top-down path) runs as
// ATen's upsample_nearest.
#include <algorithm>
#include <cmath>

#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

struct ResizeSettings {
  std::string mode, transform, nearest;
  double cubicA = -0.75, extrapolation = 0.0;
  bool excludeOutside = false;
};

// The input coordinate of output position `x` on an axis of `in` elements resized at `scale` to a
// length of `out` (ONNX's length_resized: in * scale when scales were given, before flooring).
double sourceCoordinate(const ResizeSettings& s, double x, double scale, std::int64_t in, double out,
                        double roiStart, double roiEnd) {
  const std::string& t = s.transform;
  if (t == "align_corners")
    return out == 1 ? 0.0 : x * static_cast<double>(in - 1) / (out - 1);
  if (t == "asymmetric")
    return x / scale;
  if (t == "pytorch_half_pixel")
    return out > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  if (t == "tf_half_pixel_for_nn")
    return (x + 0.5) / scale;
  if (t == "tf_crop_and_resize")
    return out > 1 ? roiStart * (in - 1) + x * (roiEnd - roiStart) * (in - 1) / (out - 1)
                   : 0.5 * (roiStart + roiEnd) * (in - 1);
  if (t == "half_pixel_symmetric") {
    double adjustment = out / (scale * static_cast<double>(in));
    double center = static_cast<double>(in) / 2.0;
    return center * (1.0 - adjustment) + (x + 0.5) / scale - 0.5;
  }
  if (t == "half_pixel")
    return (x + 0.5) / scale - 0.5;
  throw KernelError("unknown coordinate_transformation_mode '" + t + "'");
}

std::int64_t nearestIndex(const std::string& rounding, double x) {
  double floor = std::floor(x);
  bool half = x - floor == 0.5;
  if (rounding == "floor")
    return static_cast<std::int64_t>(floor);
  if (rounding == "ceil")
    return static_cast<std::int64_t>(std::ceil(x));
  if (rounding == "round_prefer_ceil")
    return static_cast<std::int64_t>(half ? floor + 1 : std::round(x));
  if (rounding == "round_prefer_floor")
    return static_cast<std::int64_t>(half ? floor : std::round(x));
  throw KernelError("unknown nearest_mode '" + rounding + "'");
}

std::vector<double> cubicWeights(double t, double a) {
  auto far = [a](double d) { return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a; };     // 1 < |d| < 2
  auto near = [a](double d) { return ((a + 2) * d - (a + 3)) * d * d + 1; };           // |d| <= 1
  return {far(t + 1), near(t), near(1 - t), far(2 - t)};
}

// Resizes `x` along `axis` to `out` elements (`length`: ONNX's unfloored length_resized).
at::Tensor resizeAxis(const at::Tensor& x, std::int64_t axis, std::int64_t out, double length, double scale,
                      double roiStart, double roiEnd, const ResizeSettings& s) {
  std::int64_t in = x.size(axis);
  std::int64_t taps = s.mode == "nearest" ? 1 : s.mode == "linear" ? 2 : 4;
  std::vector<std::int64_t> index(static_cast<std::size_t>(out * taps));
  std::vector<double> weight(static_cast<std::size_t>(out * taps));
  std::vector<std::uint8_t> outside(static_cast<std::size_t>(out), 0);
  auto clampIndex = [in](std::int64_t i) { return std::min<std::int64_t>(std::max<std::int64_t>(i, 0), in - 1); };
  for (std::int64_t o = 0; o < out; ++o) {
    double source = sourceCoordinate(s, static_cast<double>(o), scale, in, length, roiStart, roiEnd);
    if (s.transform == "tf_crop_and_resize" && (source < 0 || source > in - 1))
      outside[static_cast<std::size_t>(o)] = 1;
    std::size_t at = static_cast<std::size_t>(o * taps);
    if (s.mode == "nearest") {
      index[at] = clampIndex(nearestIndex(s.nearest, source));
      weight[at] = 1.0;
      continue;
    }
    double base = std::floor(source), t = source - base;
    std::vector<double> w = s.mode == "linear" ? std::vector<double>{1 - t, t} : cubicWeights(t, s.cubicA);
    std::int64_t first = static_cast<std::int64_t>(base) - (s.mode == "linear" ? 0 : 1);
    double kept = 0;
    for (std::int64_t k = 0; k < taps; ++k) {
      std::int64_t i = first + k;
      if (s.excludeOutside && (i < 0 || i >= in))
        w[static_cast<std::size_t>(k)] = 0;
      kept += w[static_cast<std::size_t>(k)];
      index[at + static_cast<std::size_t>(k)] = clampIndex(i);
    }
    for (std::int64_t k = 0; k < taps; ++k)
      weight[at + static_cast<std::size_t>(k)] = s.excludeOutside && kept != 0 ? w[static_cast<std::size_t>(k)] / kept
                                                                             : w[static_cast<std::size_t>(k)];
  }
  at::Tensor indices = at::tensor(index, at::TensorOptions().dtype(at::kLong)).reshape({out, taps});
  at::Tensor weights = at::tensor(weight, at::TensorOptions().dtype(at::kDouble)).reshape({out, taps});
  at::Tensor source = s.mode == "nearest" ? x : x.to(at::kDouble);
  std::vector<std::int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
  shape[static_cast<std::size_t>(axis)] = out;
  at::Tensor result;
  for (std::int64_t k = 0; k < taps; ++k) {
    at::Tensor term = source.index_select(axis, indices.select(1, k).contiguous()) *
                      weights.select(1, k).reshape(shape);
    result = result.defined() ? result + term : term;
  }
  if (s.transform == "tf_crop_and_resize") {
    at::Tensor mask = at::tensor(std::vector<std::int64_t>(outside.begin(), outside.end())).to(at::kBool).reshape(shape);
    result = at::where(mask, at::full({}, s.extrapolation, result.options()), result);
  }
  return result;
}

// ATen's upsampling computes what ONNX's linear mode does for these coordinates: source
// coordinate (x + 0.5) / scale - 0.5 clamped at 0 (ONNX clamps the taps, which gives the same
// value), or x * (in - 1) / (out - 1) for align_corners. pytorch_half_pixel differs only at an
// output length of 1, and align_corners only where scales leave a fractional length.
bool linearMatchesAten(const ResizeSettings& s, const std::vector<std::int64_t>& sizes,
                       const std::vector<double>& lengths) {
  if (s.transform != "half_pixel" && s.transform != "pytorch_half_pixel" && s.transform != "align_corners")
    return false;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (s.transform == "pytorch_half_pixel" && lengths[d] <= 1)
      return false;
    if (s.transform == "align_corners" && lengths[d] != static_cast<double>(sizes[d]))
      return false;
  }
  return true;
}

// Nearest mode with asymmetric coordinates and floor rounding (PyTorch's export of nearest
// interpolate, FPN's top-down path) picks input floor(x * in / out). ATen's upsample_nearest picks
// the same where that ratio is exact in float: each axis kept or enlarged by a power of two
// (ATen computes the ratio in float; 1/3 would round), at exactly that scale.
bool nearestMatchesAten(const at::Tensor& x, const ResizeSettings& s, const std::vector<std::int64_t>& sizes,
                        const std::vector<double>& scales) {
  if (s.transform != "asymmetric" || s.nearest != "floor")
    return false;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    const std::int64_t in = x.size(static_cast<std::int64_t>(d)), out = sizes[d];
    const bool powerOfTwo = out % in == 0 && ((out / in) & (out / in - 1)) == 0;
    if (!powerOfTwo || scales[d] != static_cast<double>(out) / static_cast<double>(in))
      return false;
  }
  return true;
}

// Whether ATen's upsample_* computes this Resize: a float32 tensor of rank 3 to 5 whose batch and
// channels stay, input and output not empty (ATen refuses empty ones; the reference path returns
// them), in linear or nearest mode with coordinates ATen shares. `sizes`, `scales`, `lengths`:
// one per dimension of `x`.
bool upsamplesLikeAten(const at::Tensor& x, const ResizeSettings& s, const std::vector<std::int64_t>& sizes,
                       const std::vector<double>& scales, const std::vector<double>& lengths) {
  if (x.scalar_type() != at::kFloat || x.dim() < 3 || x.dim() > 5 || x.numel() == 0 ||
      std::any_of(sizes.begin(), sizes.end(), [](std::int64_t size) { return size <= 0; }))
    return false;
  for (std::size_t d = 0; d < 2; ++d)
    if (sizes[d] != x.size(static_cast<std::int64_t>(d)) || scales[d] != 1.0)
      return false;
  if (s.mode == "linear")
    return linearMatchesAten(s, sizes, lengths);
  return s.mode == "nearest" && nearestMatchesAten(x, s, sizes, scales);
}

// The Resize upsamplesLikeAten accepts, on ATen.
at::Tensor upsampleWithAten(const at::Tensor& x, const ResizeSettings& s, const std::vector<std::int64_t>& sizes,
                            const std::vector<double>& scales) {
  at::IntArrayRef spatial(sizes.data() + 2, sizes.size() - 2);
  if (s.mode == "nearest") // by powers of two: ATen's own ratio in / out is exact
    return x.dim() == 3 ? at::upsample_nearest1d(x, spatial)
           : x.dim() == 4 ? at::upsample_nearest2d(x, spatial)
                          : at::upsample_nearest3d(x, spatial);
  const bool alignCorners = s.transform == "align_corners";
  auto scale = [&scales](std::size_t d) { return c10::optional<double>(scales[d]); };
  if (x.dim() == 3)
    return at::upsample_linear1d(x, spatial, alignCorners, scale(2));
  if (x.dim() == 4)
    return at::upsample_bilinear2d(x, spatial, alignCorners, scale(2), scale(3));
  return at::upsample_trilinear3d(x, spatial, alignCorners, scale(2), scale(3), scale(4));
}

// Per resized axis: the output size, the scale and the output length before rounding, from the
// `sizes` operand (3, with keep_aspect_ratio_policy) or else the `scales` operand (2).
struct ResizeGeometry {
  std::vector<double> scales;
  std::vector<std::int64_t> sizes;
  std::vector<double> lengths;
};

ResizeGeometry resizeGeometry(const KernelContext& c, const at::Tensor& x, const std::vector<std::int64_t>& axes) {
  const std::size_t n = axes.size();
  ResizeGeometry g{std::vector<double>(n, 1.0), std::vector<std::int64_t>(n), std::vector<double>(n)};
  std::vector<double>& scales = g.scales;
  std::vector<std::int64_t>& sizes = g.sizes;
  std::vector<double>& lengths = g.lengths;
  if (c.has(3) && c.input(3).numel() > 0) {
    std::vector<std::int64_t> wanted = c.ints(3);
    if (wanted.size() != n)
      throw KernelError("sizes has " + std::to_string(wanted.size()) + " entries for " + std::to_string(n) + " axes");
    std::string policy = c.stringAttr("keep_aspect_ratio_policy", "stretch");
    double common = policy == "not_larger" ? INFINITY : 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      double ratio = static_cast<double>(wanted[i]) / static_cast<double>(x.size(axes[i]));
      common = policy == "not_larger" ? std::min(common, ratio) : std::max(common, ratio);
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (policy == "stretch") {
        sizes[i] = wanted[i];
        scales[i] = static_cast<double>(wanted[i]) / static_cast<double>(x.size(axes[i]));
      } else {
        scales[i] = common;
        sizes[i] = static_cast<std::int64_t>(std::round(common * static_cast<double>(x.size(axes[i]))));
      }
      lengths[i] = static_cast<double>(sizes[i]);
    }
  } else if (c.has(2) && c.input(2).numel() > 0) {
    at::Tensor given = c.input(2).to(at::kDouble).contiguous();
    if (given.numel() != static_cast<std::int64_t>(n))
      throw KernelError("scales has " + std::to_string(given.numel()) + " entries for " + std::to_string(n) + " axes");
    for (std::size_t i = 0; i < n; ++i) {
      scales[i] = given.data_ptr<double>()[i];
      if (!(scales[i] > 0))
        throw KernelError("scales must be positive");
      lengths[i] = static_cast<double>(x.size(axes[i])) * scales[i];
      sizes[i] = static_cast<std::int64_t>(std::floor(lengths[i]));
    }
  } else {
    throw KernelError("Resize needs scales or sizes");
  }
  return g;
}

Outputs resize(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  if (c.intAttr("antialias", 0))
    throw KernelError("antialias is not supported");
  ResizeSettings s{c.stringAttr("mode", "nearest"), c.stringAttr("coordinate_transformation_mode", "half_pixel"),
                   c.stringAttr("nearest_mode", "round_prefer_floor"), c.floatAttr("cubic_coeff_a", -0.75f),
                   c.floatAttr("extrapolation_value", 0.0f), c.intAttr("exclude_outside", 0) != 0};
  if (s.mode != "nearest" && s.mode != "linear" && s.mode != "cubic")
    throw KernelError("unknown mode '" + s.mode + "'");
  std::int64_t rank = x.dim();
  std::vector<std::int64_t> axes = c.intsAttr("axes");
  if (axes.empty())
    for (std::int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  for (std::int64_t& a : axes)
    a = normalizeAxis(a, rank);
  std::size_t n = axes.size();
  std::vector<double> roi;
  if (c.has(1) && c.input(1).numel() == static_cast<std::int64_t>(2 * n)) {
    at::Tensor r = c.input(1).to(at::kDouble).contiguous();
    roi.assign(r.data_ptr<double>(), r.data_ptr<double>() + r.numel());
  }
  const ResizeGeometry geometry = resizeGeometry(c, x, axes);
  const std::vector<double>& scales = geometry.scales;
  const std::vector<std::int64_t>& sizes = geometry.sizes;
  const std::vector<double>& lengths = geometry.lengths;
  std::vector<std::int64_t> allSizes(x.sizes().begin(), x.sizes().end());
  std::vector<double> allScales(static_cast<std::size_t>(rank), 1.0), allLengths(static_cast<std::size_t>(rank));
  for (std::int64_t d = 0; d < rank; ++d)
    allLengths[static_cast<std::size_t>(d)] = static_cast<double>(x.size(d));
  for (std::size_t i = 0; i < n; ++i) {
    auto d = static_cast<std::size_t>(axes[i]);
    allSizes[d] = sizes[i];
    allScales[d] = scales[i];
    allLengths[d] = lengths[i];
  }
  if (upsamplesLikeAten(x, s, allSizes, allScales, allLengths))
    return {upsampleWithAten(x, s, allSizes, allScales)};
  at::Tensor result = x;
  for (std::size_t i = 0; i < n; ++i) {
    if (sizes[i] == x.size(axes[i]) && scales[i] == 1.0 && s.transform != "tf_crop_and_resize")
      continue;
    double start = roi.empty() ? 0.0 : roi[i], end = roi.empty() ? 1.0 : roi[n + i];
    result = resizeAxis(result, axes[i], sizes[i], lengths[i], scales[i], start, end, s);
  }
  if (!at::isFloatingType(x.scalar_type()))
    return {result.round().to(x.scalar_type())};
  return {result.to(x.scalar_type())};
}
} // namespace

void registerResizeKernels(KernelTable& t) {
  t.add("Resize", resize, hostOperands({1, 2, 3}));
}

} // namespace cleave::runtime
