// runtime/kernels/channels.cpp - kernels over the channels (dim 1) of a concatenation of pieces, made in
// one pass from the pieces so that the concatenation itself is never made: a per-channel scale and
// shift (DenseNet's Concat -> BatchNormalization -> Relu) and ShuffleNet's channel shuffle
// (Concat -> Reshape -> Transpose -> Reshape). Declared in kernel.h; the fused groups that call
// them are in fusion.h.
#include <ATen/Parallel.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "runtime/kernels/helpers.h"

namespace cleave::runtime {
namespace {

// dst[r * dstStride + j] = src[r * srcStride + j] * m[j] + s[j] for rows r and j < width, raised to
// `floor` (0 for a Relu, -inf for none; NaN stays NaN). Built for AVX-512, AVX2 and the base ISA on
// x86-64, like sumRows.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void scaleShiftRows(const float* __restrict src, std::int64_t srcStride, std::int64_t rows, std::int64_t width,
                    const float* __restrict m, const float* __restrict s, float floor, float* __restrict dst,
                    std::int64_t dstStride) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* in = src + r * srcStride;
    float* out = dst + r * dstStride;
    for (std::int64_t j = 0; j < width; ++j) {
      const float v = in[j] * m[j] + s[j];
      out[j] = v < floor ? floor : v;
    }
  }
}

// dst[k] = src[k] * m + s for k < count (one channel's plane), raised to `floor` as above.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void scaleShiftPlane(const float* __restrict src, std::int64_t count, float m, float s, float floor,
                     float* __restrict dst) {
  for (std::int64_t k = 0; k < count; ++k) {
    const float v = src[k] * m + s;
    dst[k] = v < floor ? floor : v;
  }
}

enum class PieceLayout { ChannelsLast, Planes, Other };

// The one layout every piece has, when they are float32 CPU tensors equal but for dim 1.
PieceLayout sharedLayout(const std::vector<at::Tensor>& pieces) {
  const at::Tensor& first = pieces.front();
  bool channelsLast = true, planes = true;
  for (const at::Tensor& piece : pieces) {
    if (piece.dim() != first.dim() || piece.dim() < 2 || piece.scalar_type() != at::kFloat || !piece.device().is_cpu() ||
        piece.numel() == 0)
      return PieceLayout::Other;
    for (std::int64_t d = 0; d < piece.dim(); ++d)
      if (d != 1 && piece.size(d) != first.size(d))
        return PieceLayout::Other;
    channelsLast = channelsLast && channelRowStride(piece) > 0;
    planes = planes && piece.is_contiguous();
  }
  return channelsLast ? PieceLayout::ChannelsLast : planes ? PieceLayout::Planes : PieceLayout::Other;
}

// About this many output elements per parallel task.
constexpr std::int64_t kElementsPerTask = 16384;

// channelsLastDense interleaves planes itself up to this many channels (an image's).
constexpr std::int64_t kPlanesInterleaved = 4;

void scaleShiftChannelsLast(const std::vector<at::Tensor>& pieces, const float* m, const float* s, float floor,
                            at::Tensor& out) {
  const std::int64_t channels = out.size(1), rows = out.numel() / channels;
  std::vector<std::int64_t> rowStrides;
  for (const at::Tensor& piece : pieces)
    rowStrides.push_back(channelRowStride(piece));
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, rows, std::max<std::int64_t>(1, kElementsPerTask / channels), [&](std::int64_t begin, std::int64_t end) {
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const std::int64_t width = pieces[i].size(1), stride = rowStrides[i];
      scaleShiftRows(pieces[i].data_ptr<float>() + begin * stride, stride, end - begin, width, m + offset, s + offset,
                     floor, dst + begin * channels + offset, channels);
      offset += width;
    }
  });
}

// Where channel `channel` of the concatenation lies: its piece and its channel there.
struct PieceChannel {
  std::size_t piece;
  std::int64_t channel;
};
std::vector<PieceChannel> channelSources(const std::vector<at::Tensor>& pieces) {
  std::vector<PieceChannel> sources;
  for (std::size_t p = 0; p < pieces.size(); ++p)
    for (std::int64_t k = 0; k < pieces[p].size(1); ++k)
      sources.push_back({p, k});
  return sources;
}

void scaleShiftPlanes(const std::vector<at::Tensor>& pieces, const float* m, const float* s, float floor,
                      at::Tensor& out) {
  const std::int64_t batch = out.size(0), channels = out.size(1), plane = out.numel() / std::max<std::int64_t>(1, batch * channels);
  const std::vector<PieceChannel> sources = channelSources(pieces);
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, batch * channels, std::max<std::int64_t>(1, kElementsPerTask / std::max<std::int64_t>(1, plane)),
                   [&](std::int64_t begin, std::int64_t end) {
                     for (std::int64_t task = begin; task < end; ++task) {
                       const std::int64_t n = task / channels, channel = task % channels;
                       const PieceChannel& from = sources[static_cast<std::size_t>(channel)];
                       const at::Tensor& piece = pieces[from.piece];
                       const float* src = piece.data_ptr<float>() + (n * piece.size(1) + from.channel) * plane;
                       scaleShiftPlane(src, plane, m[channel], s[channel], floor, dst + task * plane);
                     }
                   });
}

// interleaveGroups for a group count known when compiling (inlined into each ISA's clone), whose
// inner loops the compiler vectorizes.
template <int kGroups>
inline __attribute__((always_inline)) void interleaveFixedGroups(const float* const* sources, const std::int64_t* strides,
                                                                 std::int64_t perGroup, std::int64_t rows,
                                                                 float* __restrict dst, std::int64_t dstStride) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* __restrict from[kGroups];
    for (int i = 0; i < kGroups; ++i)
      from[i] = sources[i] + r * strides[i];
    float* __restrict out = dst + r * dstStride;
    for (std::int64_t j = 0; j < perGroup; ++j)
      for (int i = 0; i < kGroups; ++i)
        out[j * kGroups + i] = from[i][j];
  }
}

// out[r * dstStride + j * groups + i] = sources[i][r * strides[i] + j] for rows r, groups i and
// j < perGroup: each row's groups interleaved. Built per ISA like scaleShiftRows; two to four groups
// (ShuffleNet's two; an image's three or four planes) take loops the compiler vectorizes.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void interleaveGroups(const float* const* sources, const std::int64_t* strides, std::int64_t groups,
                      std::int64_t perGroup, std::int64_t rows, float* __restrict dst, std::int64_t dstStride) {
  switch (groups) {
  case 2: return interleaveFixedGroups<2>(sources, strides, perGroup, rows, dst, dstStride);
  case 3: return interleaveFixedGroups<3>(sources, strides, perGroup, rows, dst, dstStride);
  case 4: return interleaveFixedGroups<4>(sources, strides, perGroup, rows, dst, dstStride);
  default: break;
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    float* out = dst + r * dstStride;
    for (std::int64_t j = 0; j < perGroup; ++j)
      for (std::int64_t i = 0; i < groups; ++i)
        out[j * groups + i] = sources[i][r * strides[i] + j];
  }
}

// [N, C, spatial...] with `sizes`, channels-last dense (for any rank) or contiguous.
at::Tensor emptyInLayout(std::vector<std::int64_t> sizes, const at::TensorOptions& options, bool channelsLast) {
  if (!channelsLast)
    return at::empty(sizes, options);
  std::vector<std::int64_t> stored{sizes[0]}, order{0, static_cast<std::int64_t>(sizes.size()) - 1};
  stored.insert(stored.end(), sizes.begin() + 2, sizes.end());
  stored.push_back(sizes[1]);
  for (std::int64_t d = 1; d + 1 < static_cast<std::int64_t>(sizes.size()); ++d)
    order.push_back(d);
  return at::empty(stored, options).permute(order); // [N, spatial..., C] in memory
}

std::vector<std::int64_t> concatenatedSizes(const std::vector<at::Tensor>& pieces) {
  std::vector<std::int64_t> sizes = pieces.front().sizes().vec();
  sizes[1] = 0;
  for (const at::Tensor& piece : pieces)
    sizes[1] += piece.size(1);
  return sizes;
}

bool anyRequiresGrad(const std::vector<at::Tensor>& pieces) {
  return std::any_of(pieces.begin(), pieces.end(), [](const at::Tensor& t) { return t.requires_grad(); });
}

} // namespace

at::Tensor scaleShiftConcatenation(const std::vector<at::Tensor>& pieces, const at::Tensor& multiplier,
                                   const at::Tensor& shift, bool relu) {
  if (pieces.empty())
    return {};
  const PieceLayout layout = sharedLayout(pieces);
  if (layout == PieceLayout::Other || anyRequiresGrad(pieces))
    return {};
  const std::vector<std::int64_t> sizes = concatenatedSizes(pieces);
  if (multiplier.numel() != sizes[1] || shift.numel() != sizes[1])
    return {};
  const float floor = relu ? 0.0f : -std::numeric_limits<float>::infinity();
  const float* m = multiplier.data_ptr<float>();
  const float* s = shift.data_ptr<float>();
  at::Tensor out = emptyInLayout(sizes, pieces.front().options(), layout == PieceLayout::ChannelsLast);
  if (layout == PieceLayout::Planes)
    scaleShiftPlanes(pieces, m, s, floor, out);
  else
    scaleShiftChannelsLast(pieces, m, s, floor, out);
  return out;
}

at::Tensor shuffleChannels(const std::vector<at::Tensor>& pieces, std::int64_t groups) {
  if (pieces.empty() || groups < 1)
    return {};
  const PieceLayout layout = sharedLayout(pieces);
  if (layout == PieceLayout::Other || anyRequiresGrad(pieces))
    return {};
  const std::vector<std::int64_t> sizes = concatenatedSizes(pieces);
  const std::int64_t channels = sizes[1], perGroup = channels / groups;
  if (channels % groups != 0)
    return {};
  const std::vector<PieceChannel> sources = channelSources(pieces);
  at::Tensor out = emptyInLayout(sizes, pieces.front().options(), layout == PieceLayout::ChannelsLast);
  float* dst = out.data_ptr<float>();
  if (layout == PieceLayout::Planes) { // output plane j * groups + i is input plane i * perGroup + j
    const std::int64_t batch = sizes[0], plane = out.numel() / std::max<std::int64_t>(1, batch * channels);
    at::parallel_for(0, batch * channels, std::max<std::int64_t>(1, kElementsPerTask / std::max<std::int64_t>(1, plane)),
                     [&](std::int64_t begin, std::int64_t end) {
                       for (std::int64_t task = begin; task < end; ++task) {
                         const std::int64_t n = task / channels, c = task % channels;
                         const PieceChannel& from = sources[static_cast<std::size_t>((c % groups) * perGroup + c / groups)];
                         const at::Tensor& piece = pieces[from.piece];
                         std::copy_n(piece.data_ptr<float>() + (n * piece.size(1) + from.channel) * plane, plane,
                                     dst + task * plane);
                       }
                     });
    return out;
  }
  // Rows of channels: each group's channels must lie in one piece, read as a row-strided source.
  std::vector<const float*> groupStarts;
  std::vector<std::int64_t> groupStrides;
  for (std::int64_t i = 0; i < groups; ++i) {
    const PieceChannel& first = sources[static_cast<std::size_t>(i * perGroup)];
    const PieceChannel& last = sources[static_cast<std::size_t>(i * perGroup + perGroup - 1)];
    if (first.piece != last.piece)
      return {};
    const at::Tensor& piece = pieces[first.piece];
    groupStarts.push_back(piece.data_ptr<float>() + first.channel);
    groupStrides.push_back(channelRowStride(piece));
  }
  const std::int64_t rows = out.numel() / std::max<std::int64_t>(1, channels);
  at::parallel_for(0, rows, std::max<std::int64_t>(1, kElementsPerTask / std::max<std::int64_t>(1, channels)),
                   [&](std::int64_t begin, std::int64_t end) {
                     std::vector<const float*> starts(groupStarts);
                     for (std::size_t i = 0; i < starts.size(); ++i)
                       starts[i] += begin * groupStrides[i];
                     interleaveGroups(starts.data(), groupStrides.data(), groups, perGroup, end - begin,
                                      dst + begin * channels, channels);
                   });
  return out;
}

at::Tensor channelsLastDense(const at::Tensor& x) {
  const at::MemoryFormat channelsLast = x.dim() == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::ChannelsLast;
  if (x.is_contiguous(channelsLast))
    return x;
  const std::int64_t channels = x.size(1);
  if (channels > kPlanesInterleaved || x.scalar_type() != at::kFloat || !x.device().is_cpu() ||
      !x.is_contiguous() || x.requires_grad())
    return x.contiguous(channelsLast);
  at::Tensor out = emptyInLayout(x.sizes().vec(), x.options(), true);
  const std::int64_t batch = x.size(0), plane = x.numel() / std::max<std::int64_t>(1, batch * channels);
  const float* src = x.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const std::int64_t noStride[kPlanesInterleaved] = {};
  // Tasks are spans of one batch entry's positions: each writes a contiguous span of the output.
  const std::int64_t spansPerEntry = std::max<std::int64_t>(1, plane * channels / kElementsPerTask);
  const std::int64_t span = (plane + spansPerEntry - 1) / spansPerEntry;
  at::parallel_for(0, batch * spansPerEntry, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t n = task / spansPerEntry, from = (task % spansPerEntry) * span;
      const std::int64_t count = std::min(span, plane - from);
      if (count <= 0)
        continue;
      const float* planes[kPlanesInterleaved];
      for (std::int64_t c = 0; c < channels; ++c)
        planes[c] = src + (n * channels + c) * plane + from;
      interleaveGroups(planes, noStride, channels, count, 1, dst + (n * plane + from) * channels, 0);
    }
  });
  return out;
}

} // namespace cleave::runtime
