// runtime/kernels/spatial.cpp - ONNX ops over spatial and channel axes that ATen has no single op
// for, or names differently: GridSample, MaxUnpool, LRN, MeanVarianceNormalization,
// NonMaxSuppression, RoiAlign.
//
// GridSample (opset 16): ATen's grid_sampler with ONNX's mode (bilinear, nearest, bicubic),
// padding_mode (zeros, border, reflection) and align_corners. MaxUnpool: each value goes to the
// flat position MaxPool's Indices gave it (over the whole N x C x spatial tensor), the rest zero;
// output shape from `output_shape` or (in - 1) * stride + kernel - pads. LRN: x / (bias +
// alpha / size * sum of squares over the channel window [c - floor((size-1)/2), c +
// ceil((size-1)/2)])^beta. MVN: (x - mean) / sqrt(variance + 1e-9) over `axes` (default 0, 2, 3).
// NonMaxSuppression: per batch and class, boxes scoring above score_threshold in descending score
// order (ties: lower index first), each kept unless its IoU with a kept box exceeds
// iou_threshold, at most max_output_boxes_per_class; corners in any order, or center_point_box.
// Cost: linear in the tensor (LRN: times `size`), GridSample: ATen's, NMS: O(boxes x kept) per class
// at worst, O(boxes x kept boxes within a box's width along x) as bucketed (KeptBoxes).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>

#include <ATen/Parallel.h>

#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

std::int64_t choice(const std::string& value, std::initializer_list<const char*> names, const char* what) {
  std::int64_t i = 0;
  for (const char* name : names) {
    if (value == name)
      return i;
    ++i;
  }
  throw KernelError(std::string("unknown ") + what + " '" + value + "'");
}

Outputs gridSample(KernelContext& c) {
  // Opset 20 renamed the modes for any rank: linear, nearest, cubic (ATen's grid_sampler takes 4-D
  // inputs in all three and 5-D in the first two).
  std::int64_t mode = c.opset() >= 20
                          ? choice(c.stringAttr("mode", "linear"), {"linear", "nearest", "cubic"}, "mode")
                          : choice(c.stringAttr("mode", "bilinear"), {"bilinear", "nearest", "bicubic"}, "mode");
  std::int64_t padding =
      choice(c.stringAttr("padding_mode", "zeros"), {"zeros", "border", "reflection"}, "padding_mode");
  bool alignCorners = c.intAttr("align_corners", 0) != 0;
  const at::Tensor& x = c.input(0);
  return {at::grid_sampler(x, c.input(1).to(x.scalar_type()), mode, padding, alignCorners)};
}

// The shape MaxPool's input had: (in - 1) * stride + kernel - pads per spatial axis.
std::vector<std::int64_t> unpooledShape(const KernelContext& c, const at::Tensor& x) {
  std::size_t spatial = x.dim() - 2;
  std::vector<std::int64_t> kernel = c.intsAttr("kernel_shape"), strides = c.intsAttr("strides"),
                            pads = c.intsAttr("pads");
  if (kernel.size() != spatial)
    throw KernelError("kernel_shape must have one entry per spatial axis");
  std::vector<std::int64_t> shape = {x.size(0), x.size(1)};
  for (std::size_t d = 0; d < spatial; ++d) {
    std::int64_t stride = d < strides.size() ? strides[d] : 1;
    std::int64_t padded = pads.size() == 2 * spatial ? pads[d] + pads[d + spatial] : 0;
    shape.push_back((x.size(2 + d) - 1) * stride + kernel[d] - padded);
  }
  return shape;
}

// Indices are flat positions in MaxPool's input; a larger output_shape keeps each value at the
// same coordinates, zeros after them (ONNX's reference).
Outputs maxUnpool(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  if (x.dim() < 3)
    throw KernelError("X must have spatial axes");
  at::Tensor unpooled = at::zeros(unpooledShape(c, x), x.options());
  at::Tensor flatIndices = c.input(1).to(at::kLong).reshape({-1});
  if (flatIndices.numel() != x.numel())
    throw KernelError("I must have as many entries as X");
  if (flatIndices.numel() > 0 && (flatIndices.min().item<std::int64_t>() < 0 ||
                                  flatIndices.max().item<std::int64_t>() >= unpooled.numel()))
    throw KernelError("an index in I is outside the unpooled tensor");
  unpooled.view({-1}).index_put_({flatIndices}, x.reshape({-1}));
  if (!c.has(2))
    return {unpooled};
  std::vector<std::int64_t> shape = c.ints(2);
  if (shape.size() != static_cast<std::size_t>(x.dim()))
    throw KernelError("output_shape must have one entry per axis of X");
  at::Tensor out = at::zeros(shape, x.options());
  at::Tensor region = out, source = unpooled;
  for (std::int64_t d = 0; d < x.dim(); ++d) {
    std::int64_t extent = std::min(shape[d], unpooled.size(d));
    region = region.narrow(d, 0, extent);
    source = source.narrow(d, 0, extent);
  }
  region.copy_(source);
  return {out};
}

Outputs lrn(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  std::int64_t size = c.intAttr("size", 0);
  if (size <= 0)
    throw KernelError("size must be positive");
  double alpha = c.floatAttr("alpha", 1e-4f), beta = c.floatAttr("beta", 0.75f), bias = c.floatAttr("bias", 1.0f);
  std::int64_t before = (size - 1) / 2, after = size - 1 - before;
  at::Tensor squares = x.pow(2).transpose(1, -1); // channels last, for constant_pad_nd
  at::Tensor padded = at::constant_pad_nd(squares, {before, after});
  at::Tensor sums = padded.unfold(-1, size, 1).sum(-1).transpose(1, -1);
  return {x / (bias + alpha / static_cast<double>(size) * sums).pow(beta)};
}

Outputs meanVarianceNormalization(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  std::vector<std::int64_t> axes = c.intsAttr("axes", {0, 2, 3});
  for (std::int64_t& axis : axes)
    axis = normalizeAxis(axis, x.dim());
  at::Tensor mean = x.mean(axes, true);
  at::Tensor variance = (x - mean).pow(2).mean(axes, true);
  return {(x - mean) / (variance + 1e-9).sqrt()};
}
struct Box {
  float y1, x1, y2, x2;
  float area() const { return (y2 - y1) * (x2 - x1); }
};

Box boxAt(const float* b, bool centerPoint) {
  if (centerPoint) // [x_center, y_center, width, height]
    return {b[1] - b[3] / 2, b[0] - b[2] / 2, b[1] + b[3] / 2, b[0] + b[2] / 2};
  return {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

float iou(const Box& a, const Box& b) {
  float h = std::max(0.0f, std::min(a.y2, b.y2) - std::max(a.y1, b.y1));
  float w = std::max(0.0f, std::min(a.x2, b.x2) - std::max(a.x1, b.x1));
  float inter = h * w, uni = a.area() + b.area() - inter;
  return uni > 0 ? inter / uni : 0.0f;
}

// The boxes one class has kept, bucketed into columns by their left edge, so that a candidate is
// compared only with kept boxes whose x-range can meet its own (three columns at most). Exact: a
// box that does not overlap the candidate along x has IoU 0, which suppresses nothing under a
// threshold >= 0. Columns are at least as wide as the widest candidate, and there are at most
// four per candidate. torchvision's batched NMS shifts each class's boxes apart and runs one NMS
// over them all (SSDlite: 27,000 boxes): there this is the difference between comparing with
// every kept box and with a few. Default-constructed, it has one column: every kept box is
// compared (for corners that are not finite, or a threshold IoU 0 passes).
class KeptBoxes {
public:
  KeptBoxes() : columns_(1) {}
  KeptBoxes(float minLeft, float maxLeft, float widest, std::size_t candidates) : origin_(minLeft) {
    const double span = static_cast<double>(maxLeft) - static_cast<double>(minLeft);
    width_ = std::max({static_cast<double>(widest), span / (4.0 * static_cast<double>(candidates + 1)), 1e-6});
    columns_.resize(static_cast<std::size_t>(span / width_) + 1);
  }

  bool suppresses(const Box& box, float threshold) const {
    for (std::size_t col = column(box.x1 - width_), last = column(box.x2); col <= last; ++col)
      for (const Box& kept : columns_[col])
        if (iou(box, kept) > threshold)
          return true;
    return false;
  }

  void add(const Box& box) { columns_[column(box.x1)].push_back(box); }

private:
  std::size_t column(double x) const {
    if (columns_.size() == 1)
      return 0;
    const double at = std::floor((x - static_cast<double>(origin_)) / width_);
    return static_cast<std::size_t>(std::clamp(at, 0.0, static_cast<double>(columns_.size() - 1)));
  }

  float origin_ = 0.0f;
  double width_ = 1.0;
  std::vector<std::vector<Box>> columns_;
};

// One class's selection: `order` (indices by descending score) kept greedily unless a kept box
// overlaps past the threshold; at most `limit`. Appends (batch, class, index) rows to `selected`.
void selectBoxes(const std::vector<std::int64_t>& order, const float* boxData, bool centerPoint, float threshold,
                 std::int64_t limit, std::int64_t batch, std::int64_t cls, std::vector<std::int64_t>& selected) {
  if (order.empty())
    return;
  std::vector<Box> candidates;
  candidates.reserve(order.size());
  float minLeft = std::numeric_limits<float>::infinity(), maxLeft = -minLeft, widest = 0.0f;
  bool finite = true;
  for (std::int64_t i : order) {
    const Box box = boxAt(boxData + i * 4, centerPoint);
    finite = finite && std::isfinite(box.x1) && std::isfinite(box.x2) && std::isfinite(box.y1) && std::isfinite(box.y2);
    minLeft = std::min(minLeft, box.x1);
    maxLeft = std::max(maxLeft, box.x1);
    widest = std::max(widest, box.x2 - box.x1);
    candidates.push_back(box);
  }
  // NaN or infinite corners, or a threshold IoU 0 can pass: every kept box is compared.
  KeptBoxes kept = finite && threshold >= 0.0f ? KeptBoxes(minLeft, maxLeft, widest, candidates.size()) : KeptBoxes();
  std::int64_t count = 0;
  for (std::size_t n = 0; n < candidates.size() && count < limit; ++n) {
    if (kept.suppresses(candidates[n], threshold))
      continue;
    kept.add(candidates[n]);
    selected.insert(selected.end(), {batch, cls, order[n]});
    ++count;
  }
}

Outputs nonMaxSuppression(KernelContext& c) {
  at::Tensor boxes = c.input(0).to(at::kFloat).contiguous(), scores = c.input(1).to(at::kFloat).contiguous();
  if (boxes.dim() != 3 || boxes.size(2) != 4 || scores.dim() != 3 || scores.size(0) != boxes.size(0) ||
      scores.size(2) != boxes.size(1))
    throw KernelError("boxes must be [batches, boxes, 4] and scores [batches, classes, boxes]");
  std::int64_t maxPerClass = c.has(2) ? c.ints(2).at(0) : 0;
  float iouThreshold = c.has(3) ? c.input(3).item<float>() : 0.0f;
  std::optional<float> scoreThreshold;
  if (c.has(4))
    scoreThreshold = c.input(4).item<float>();
  bool centerPoint = c.intAttr("center_point_box", 0) != 0;
  std::int64_t batches = boxes.size(0), classes = scores.size(1), count = boxes.size(1);
  const float* boxData = boxes.data_ptr<float>();
  const float* scoreData = scores.data_ptr<float>();
  std::vector<std::int64_t> selected;
  for (std::int64_t b = 0; b < batches && maxPerClass > 0; ++b)
    for (std::int64_t k = 0; k < classes; ++k) {
      const float* score = scoreData + (b * classes + k) * count;
      std::vector<std::int64_t> order;
      for (std::int64_t i = 0; i < count; ++i)
        if (!scoreThreshold || score[i] > *scoreThreshold)
          order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t l, std::int64_t r) { return score[l] > score[r]; });
      selectBoxes(order, boxData + b * count * 4, centerPoint, iouThreshold, maxPerClass, b, k, selected);
    }
  std::int64_t rows = static_cast<std::int64_t>(selected.size() / 3);
  return {at::tensor(selected, at::kLong).reshape({rows, 3})};
}
// One bilinear sample of a [H, W] plane at (y, x) as its four corners' flat offsets and weights,
// with the RoiAlign boundary rules: outside [-1, H] x [-1, W] every weight is 0; coordinates below
// 0 clamp to 0 and past the last row / column to it.
struct BilinearTap {
  std::array<std::int64_t, 4> offset{};
  std::array<float, 4> weight{};
};

BilinearTap bilinearTap(std::int64_t height, std::int64_t width, double y, double x) {
  BilinearTap tap;
  if (y < -1.0 || y > static_cast<double>(height) || x < -1.0 || x > static_cast<double>(width))
    return tap;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  std::int64_t y0 = static_cast<std::int64_t>(y), x0 = static_cast<std::int64_t>(x), y1 = y0 + 1, x1 = x0 + 1;
  if (y0 >= height - 1) {
    y0 = y1 = height - 1;
    y = static_cast<double>(y0);
  }
  if (x0 >= width - 1) {
    x0 = x1 = width - 1;
    x = static_cast<double>(x0);
  }
  const double ly = y - static_cast<double>(y0), lx = x - static_cast<double>(x0), hy = 1 - ly, hx = 1 - lx;
  tap.offset = {y0 * width + x0, y0 * width + x1, y1 * width + x0, y1 * width + x1};
  tap.weight = {static_cast<float>(hy * hx), static_cast<float>(hy * lx), static_cast<float>(ly * hx),
                static_cast<float>(ly * lx)};
  return tap;
}

// A region's geometry: where its sampling grid starts and the size of a bin and of its grid.
struct RoiGrid {
  double startY, startX, binH, binW;
  std::int64_t gridH, gridW;
};

RoiGrid roiGrid(const double* box, double scale, bool halfPixel, std::int64_t outH, std::int64_t outW,
                std::int64_t ratio) {
  const double offset = halfPixel ? 0.5 : 0.0;
  RoiGrid grid{};
  grid.startX = box[0] * scale - offset;
  grid.startY = box[1] * scale - offset;
  double roiW = box[2] * scale - offset - grid.startX, roiH = box[3] * scale - offset - grid.startY;
  if (!halfPixel) {
    roiW = std::max(roiW, 1.0);
    roiH = std::max(roiH, 1.0);
  }
  grid.binH = roiH / static_cast<double>(outH);
  grid.binW = roiW / static_cast<double>(outW);
  grid.gridH = ratio > 0 ? ratio : static_cast<std::int64_t>(std::ceil(grid.binH));
  grid.gridW = ratio > 0 ? ratio : static_cast<std::int64_t>(std::ceil(grid.binW));
  return grid;
}

// One output bin of every channel: `samples` taps from a channels-last image (`channels` floats
// per pixel) into `bin`, averaged (or the largest weighted corner, ONNX Runtime's max mode), with
// each sample's four corners summed before it is added, as ONNX Runtime does. Vectorized across
// channels.
void roiBin(const float* image, std::int64_t channels, const BilinearTap* taps, std::int64_t samples, bool max,
            float* bin) {
  if (max) {
    // The largest sample, negative ones included (0 for a bin without samples).
    std::fill(bin, bin + channels, samples > 0 ? -std::numeric_limits<float>::infinity() : 0.0f);
  } else {
    std::fill(bin, bin + channels, 0.0f);
  }
  for (std::int64_t s = 0; s < samples; ++s) {
    const BilinearTap& tap = taps[s];
    const float *p0 = image + tap.offset[0] * channels, *p1 = image + tap.offset[1] * channels,
                *p2 = image + tap.offset[2] * channels, *p3 = image + tap.offset[3] * channels;
    const float w0 = tap.weight[0], w1 = tap.weight[1], w2 = tap.weight[2], w3 = tap.weight[3];
    if (max) {
      for (std::int64_t ch = 0; ch < channels; ++ch)
        bin[ch] = std::max(bin[ch], std::max(std::max(std::max(w0 * p0[ch], w1 * p1[ch]), w2 * p2[ch]), w3 * p3[ch]));
    } else {
      for (std::int64_t ch = 0; ch < channels; ++ch)
        bin[ch] += w0 * p0[ch] + w1 * p1[ch] + w2 * p2[ch] + w3 * p3[ch];
    }
  }
  if (!max) {
    const float count = static_cast<float>(std::max<std::int64_t>(samples, 1));
    for (std::int64_t ch = 0; ch < channels; ++ch)
      bin[ch] /= count;
  }
}

// RoiAlign (opset 10 and 16): each region [x1, y1, x2, y2] (times spatial_scale, shifted by half a
// pixel under half_pixel) split into output_height x output_width bins, each the average (or max)
// of sampling_ratio^2 bilinear samples (0: ceil(bin size) per axis); output_half_pixel (opset 10's
// only mode) makes regions at least 1 x 1. Each region's samples (corner offsets and weights) are
// computed once; the image is read channels-last (a convolution's output already is), so every
// sample is one pass over contiguous channels; regions run in parallel. Float arithmetic, as ONNX
// Runtime's. Measured on Faster R-CNN's box pooling ([1, 256, 10, 10], 150 regions, 7 x 7, ratio
// 2): 91 ms with a sample computed per channel, 27 ms per region, 4.7 ms channels-last (ORT 18-22).
// O(rois * bins * samples * channels).
Outputs roiAlign(KernelContext& c) {
  if (c.input(0).dim() != 4 || c.input(1).dim() != 2 || c.input(1).size(1) != 4 ||
      c.input(2).numel() != c.input(1).size(0))
    throw KernelError("RoiAlign takes X [N, C, H, W], rois [R, 4] and batch_indices [R]");
  const at::Tensor x = denseFromPrivateLayout(c.input(0)).to(at::kFloat).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor rois = c.input(1).to(at::kDouble).contiguous(), batch = c.input(2).to(at::kLong).contiguous();
  const std::int64_t outH = c.intAttr("output_height", 1), outW = c.intAttr("output_width", 1);
  const std::int64_t ratio = c.intAttr("sampling_ratio", 0);
  const double scale = c.floatAttr("spatial_scale", 1.0f);
  const bool halfPixel = c.stringAttr("coordinate_transformation_mode", c.opset() >= 16 ? "half_pixel" : "output_half_pixel") ==
                         "half_pixel";
  const bool max = c.stringAttr("mode", "avg") == "max";
  const std::int64_t channels = x.size(1), height = x.size(2), width = x.size(3), regions = rois.size(0);
  const double* box = rois.data_ptr<double>();
  const std::int64_t* image = batch.data_ptr<std::int64_t>();
  for (std::int64_t r = 0; r < regions; ++r)
    if (image[r] < 0 || image[r] >= x.size(0))
      throw KernelError("batch index " + std::to_string(image[r]) + " is outside the batch");
  const std::int64_t bins = outH * outW;
  at::Tensor y = at::empty({regions, channels, outH, outW}, x.options());
  const float* input = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  at::parallel_for(0, regions, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<BilinearTap> taps;
    std::vector<float> bin(static_cast<std::size_t>(channels));
    for (std::int64_t r = begin; r < end; ++r) {
      const RoiGrid grid = roiGrid(box + 4 * r, scale, halfPixel, outH, outW, ratio);
      const std::int64_t samples = grid.gridH * grid.gridW;
      taps.clear(); // bin by bin, each bin's samples row by row
      for (std::int64_t ph = 0; ph < outH; ++ph)
        for (std::int64_t pw = 0; pw < outW; ++pw)
          for (std::int64_t iy = 0; iy < grid.gridH; ++iy) {
            const double sy = grid.startY + static_cast<double>(ph) * grid.binH +
                              (static_cast<double>(iy) + 0.5) * grid.binH / static_cast<double>(grid.gridH);
            for (std::int64_t ix = 0; ix < grid.gridW; ++ix) {
              const double sx = grid.startX + static_cast<double>(pw) * grid.binW +
                                (static_cast<double>(ix) + 0.5) * grid.binW / static_cast<double>(grid.gridW);
              taps.push_back(bilinearTap(height, width, sy, sx));
            }
          }
      const float* pixels = input + image[r] * height * width * channels;
      for (std::int64_t b = 0; b < bins; ++b) {
        roiBin(pixels, channels, taps.data() + b * samples, samples, max, bin.data());
        for (std::int64_t ch = 0; ch < channels; ++ch) // into [R, C, outH, outW]
          out[(r * channels + ch) * bins + b] = bin[static_cast<std::size_t>(ch)];
      }
    }
  });
  return {y.to(c.input(0).scalar_type())};
}
} // namespace

void registerSpatialKernels(KernelTable& t) {
  t.add("RoiAlign", roiAlign);
  t.add("GridSample", gridSample);
  t.add("MaxUnpool", maxUnpool, hostOperands({2}));
  t.add("LRN", lrn);
  t.add("MeanVarianceNormalization", meanVarianceNormalization);
  t.add("NonMaxSuppression", nonMaxSuppression, hostOperands({2, 3, 4}));
}

} // namespace cleave::runtime
