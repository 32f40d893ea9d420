// runtime/kernels/decoder_rows.cpp - one-pass float32 kernels for a decoder's per-row ops, where
// ATen would run one op per step of the formula: RMSNormalization (rmsNormalizeRows) and
// RotaryEmbedding (rotateRows). Declared in helpers.h; nn.cpp's kernels call them for float32
// CPU tensors and keep ATen's composition for everything else.
#include <ATen/Parallel.h>

#include <cmath>
#include <string>

#include "runtime/kernels/helpers.h"

namespace cleave::runtime {
namespace {
// Rows handed to a thread at a time: about this many elements (as channels.cpp's kernels do).
constexpr std::int64_t kElementsPerTask = 16384;

std::int64_t rowsPerTask(std::int64_t width) { return std::max<std::int64_t>(1, kElementsPerTask / std::max<std::int64_t>(1, width)); }

// out = in * (1 / sqrt(mean(in^2) + epsilon)) * scale over each row of `width`, the sum of squares
// kept in 8 partial sums (vectorized; float32 throughout, as ONNX's stash_type 1 computes).
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void rmsNormalizeRow(const float* __restrict in, const float* __restrict scale, std::int64_t width, float epsilon,
                     float* __restrict out) {
  float partial[8] = {};
  std::int64_t j = 0;
  for (; j + 8 <= width; j += 8)
    for (int l = 0; l < 8; ++l)
      partial[l] += in[j + l] * in[j + l];
  float sum = 0.0f;
  for (; j < width; ++j)
    sum += in[j] * in[j];
  for (float p : partial)
    sum += p;
  const float inverse = 1.0f / std::sqrt(sum / static_cast<float>(width) + epsilon);
  for (std::int64_t k = 0; k < width; ++k)
    out[k] = in[k] * inverse * scale[k];
}

// One row of `head` values rotated by the row's cos and sin (dim / 2 each): the first `dim` values
// in pairs (halves, or neighbours when `interleaved`), the rest copied.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void rotateRow(const float* __restrict in, const float* __restrict cos, const float* __restrict sin, std::int64_t head,
               std::int64_t dim, bool interleaved, float* __restrict out) {
  const std::int64_t half = dim / 2;
  if (interleaved) {
    for (std::int64_t i = 0; i < half; ++i) {
      const float first = in[2 * i], second = in[2 * i + 1];
      out[2 * i] = cos[i] * first - sin[i] * second;
      out[2 * i + 1] = sin[i] * first + cos[i] * second;
    }
  } else {
    for (std::int64_t i = 0; i < half; ++i) {
      const float first = in[i], second = in[i + half];
      out[i] = cos[i] * first - sin[i] * second;
      out[i + half] = sin[i] * first + cos[i] * second;
    }
  }
  for (std::int64_t i = dim; i < head; ++i)
    out[i] = in[i];
}

bool denseFloat(const at::Tensor& t) {
  return t.defined() && t.scalar_type() == at::kFloat && t.device().is_cpu() && t.is_contiguous() && !t.requires_grad();
}
} // namespace

at::Tensor rmsNormalizeRows(const at::Tensor& x, const at::Tensor& scale, float epsilon) {
  if (!denseFloat(x) || !denseFloat(scale) || x.numel() == 0 || scale.numel() == 0 || x.numel() % scale.numel() != 0)
    return {};
  const std::int64_t width = scale.numel(), rows = x.numel() / width;
  at::Tensor out = at::empty_like(x);
  const float *in = x.data_ptr<float>(), *s = scale.data_ptr<float>();
  float* to = out.data_ptr<float>();
  at::parallel_for(0, rows, rowsPerTask(width), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r)
      rmsNormalizeRow(in + r * width, s, width, epsilon, to + r * width);
  });
  return out;
}

at::Tensor rotateRows(const at::Tensor& x, bool sequenceSecond, const at::Tensor& cos, const at::Tensor& sin,
                      const at::Tensor& positions, std::int64_t dim, bool interleaved) {
  if (!denseFloat(x) || x.dim() != 4 || !denseFloat(cos) || !denseFloat(sin) || cos.sizes() != sin.sizes() ||
      cos.size(-1) != dim / 2 || (positions.defined() && (positions.scalar_type() != at::kLong || !positions.is_contiguous())))
    return {};
  // x: [batch, sequence, heads, head] (sequenceSecond) or [batch, heads, sequence, head].
  const std::int64_t batch = x.size(0), sequence = x.size(sequenceSecond ? 1 : 2), head = x.size(3);
  const std::int64_t half = dim / 2, positionCount = cos.size(0);
  const bool byPosition = positions.defined(); // cos [positions, dim / 2] looked up, else [batch, sequence, dim / 2]
  if (byPosition ? (cos.dim() != 2 || positions.dim() != 2 || positions.size(0) != batch || positions.size(1) != sequence)
                 : (cos.dim() != 3 || cos.size(0) != batch || cos.size(1) != sequence))
    return {};
  const std::int64_t* ids = byPosition ? positions.data_ptr<std::int64_t>() : nullptr;
  if (byPosition)
    for (std::int64_t i = 0; i < batch * sequence; ++i)
      if (ids[i] < 0 || ids[i] >= positionCount)
        throw KernelError("position id " + std::to_string(ids[i]) + " is outside the cos and sin caches' " +
                          std::to_string(positionCount) + " positions");
  at::Tensor out = at::empty_like(x);
  const float *in = x.data_ptr<float>(), *cosines = cos.data_ptr<float>(), *sines = sin.data_ptr<float>();
  float* to = out.data_ptr<float>();
  const std::int64_t rows = x.numel() / head, d1 = x.size(1), d2 = x.size(2);
  at::parallel_for(0, rows, rowsPerTask(head), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t b = r / (d1 * d2), s = sequenceSecond ? r / d2 % d1 : r % d2;
      const std::int64_t at = byPosition ? ids[b * sequence + s] : b * sequence + s;
      rotateRow(in + r * head, cosines + at * half, sines + at * half, head, dim, interleaved, to + r * head);
    }
  });
  return out;
}

} // namespace cleave::runtime
