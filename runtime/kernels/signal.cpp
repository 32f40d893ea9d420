// runtime/kernels/signal.cpp - ONNX's signal ops (opset 17) on ATen: HannWindow, HammingWindow,
// BlackmanWindow, DFT, STFT and MelWeightMatrix.
//
// Windows: N' = size when periodic (the default), size - 1 when symmetric; Hamming with ONNX's
// alpha = 25/46 (not torch's 0.54). DFT: real ([..., 1]) or complex ([..., 2]) input, along
// `axis`, zero-padded or cut to `dft_length`; `inverse` divides by the length (numpy's ifft);
// `onesided` keeps the first length / 2 + 1 bins. Computed in double, returned in the input's type. Output: complex as a trailing [re, im] axis.
// STFT: frames of frame_length (or the window's length) every frame_step samples, each times the
// window and transformed (onesided by default): [batch, frames, bins, 2].
// MelWeightMatrix: [dft_length / 2 + 1, num_mel_bins] triangular filters between mel-spaced
// edges (num_mel_bins + 2 points from lower to upper edge, mel = 2595 log10(1 + f / 700)), each
// edge mapped to the DFT bin floor((dft_length + 1) f / sample_rate).
// Cost: a window is O(size); a DFT is ATen's FFT, O(n log n) per transformed line; STFT that per
// frame; MelWeightMatrix O(bins * mel bins).
#include <cmath>

#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

enum class Window : std::uint8_t { Hann, Hamming, Blackman };

Outputs window(KernelContext& c, Window kind) {
  std::int64_t size = c.ints(0).at(0);
  if (size < 0)
    throw KernelError("window size must not be negative");
  bool periodic = c.intAttr("periodic", 1) != 0;
  at::TensorOptions options = at::TensorOptions().dtype(at::kDouble);
  at::Tensor w;
  switch (kind) {
  case Window::Hann: w = at::hann_window(size, periodic, options); break;
  case Window::Hamming: w = at::hamming_window(size, periodic, 25.0 / 46.0, 21.0 / 46.0, options); break;
  case Window::Blackman: w = at::blackman_window(size, periodic, options); break;
  }
  return {w.to(onnxScalarType(c.intAttr("output_datatype", 1)))};
}

Outputs dft(KernelContext& c) {
  at::Tensor x = c.input(0);
  if (x.dim() < 2 || (x.size(-1) != 1 && x.size(-1) != 2))
    throw KernelError("DFT input must end in an axis of 1 (real) or 2 (complex) entries");
  // Opset 20 moved the axis from an attribute (default 1) to input 2 (default -2, the last signal
  // axis; negative counts from the back of the input's rank).
  const std::int64_t given = c.opset() >= 20 ? (c.has(2) ? c.ints(2).at(0) : -2) : c.intAttr("axis", 1);
  const std::int64_t axis = given < 0 ? given + x.dim() : given;
  if (axis < 0 || axis >= x.dim() - 1)
    throw KernelError("axis " + std::to_string(given) + " is out of range");
  bool inverse = c.intAttr("inverse", 0) != 0, onesided = c.intAttr("onesided", 0) != 0;
  at::ScalarType type = x.scalar_type();
  at::Tensor pairs = x.to(at::kDouble); // float's FFT leaves 1e-6 where exact bins are 0
  if (pairs.size(-1) == 1)
    pairs = at::cat({pairs, at::zeros_like(pairs)}, -1);
  at::Tensor complex = at::view_as_complex(pairs.contiguous());
  if (inverse && onesided) { // a half spectrum back to a real signal (numpy's irfft)
    std::int64_t length = c.has(1) ? c.ints(1).at(0) : 2 * (complex.size(axis) - 1);
    if (length <= 0)
      throw KernelError("dft_length must be positive");
    return {at::fft_irfft(complex, length, axis).unsqueeze(-1).contiguous().to(type)};
  }
  std::int64_t length = c.has(1) ? c.ints(1).at(0) : complex.size(axis);
  if (length <= 0)
    throw KernelError("dft_length must be positive");
  at::Tensor out = inverse ? at::fft_ifft(complex, length, axis) : at::fft_fft(complex, length, axis);
  if (onesided)
    out = out.slice(axis, 0, length / 2 + 1);
  return {at::view_as_real(out).contiguous().to(type)};
}
Outputs stft(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  if (x.dim() != 3 || (x.size(2) != 1 && x.size(2) != 2))
    throw KernelError("STFT takes a signal [batch, length, 1 or 2]");
  const std::int64_t step = c.ints(1).at(0);
  at::Tensor window = c.has(2) ? c.input(2).to(at::kDouble) : at::Tensor();
  const std::int64_t frameLength = c.has(3) ? c.ints(3).at(0) : window.defined() ? window.numel() : 0;
  if (step <= 0 || frameLength <= 0 || frameLength > x.size(1) || (window.defined() && window.numel() != frameLength))
    throw KernelError("STFT needs frame_step > 0 and a frame_length (or window) within the signal");
  at::Tensor pairs = x.to(at::kDouble);
  if (pairs.size(-1) == 1)
    pairs = at::cat({pairs, at::zeros_like(pairs)}, -1);
  at::Tensor frames = at::view_as_complex(pairs.contiguous()).unfold(1, frameLength, step); // [batch, frames, length]
  if (window.defined())
    frames = frames * window;
  at::Tensor out = at::fft_fft(frames, frameLength, -1);
  if (c.intAttr("onesided", 1) != 0)
    out = out.slice(-1, 0, frameLength / 2 + 1);
  return {at::view_as_real(out).contiguous().to(x.scalar_type())};
}

Outputs melWeightMatrix(KernelContext& c) {
  const std::int64_t mels = c.ints(0).at(0), dftLength = c.ints(1).at(0), rate = c.ints(2).at(0);
  const double lower = c.input(3).item<double>(), upper = c.input(4).item<double>();
  if (mels <= 0 || dftLength <= 0 || rate <= 0)
    throw KernelError("MelWeightMatrix needs positive num_mel_bins, dft_length and sample_rate");
  const std::int64_t bins = dftLength / 2 + 1;
  auto toMel = [](double hertz) { return 2595.0 * std::log10(1.0 + hertz / 700.0); };
  const double low = toMel(lower), step = (toMel(upper) - low) / static_cast<double>(mels + 2);
  std::vector<std::int64_t> edges;
  for (std::int64_t k = 0; k < mels + 2; ++k) {
    double hertz = 700.0 * (std::pow(10.0, (static_cast<double>(k) * step + low) / 2595.0) - 1.0);
    edges.push_back(static_cast<std::int64_t>(std::floor(static_cast<double>(dftLength + 1) * hertz / static_cast<double>(rate))));
  }
  at::Tensor out = at::zeros({bins, mels}, at::TensorOptions().dtype(at::kDouble));
  auto set = [&](std::int64_t bin, std::int64_t mel, double value) {
    if (bin < 0 || bin >= bins)
      throw KernelError("a mel edge falls outside the DFT's bins (upper_edge_hertz above sample_rate / 2?)");
    out[bin][mel] = value;
  };
  for (std::int64_t m = 0; m < mels; ++m) {
    const std::int64_t left = edges[m], center = edges[m + 1], right = edges[m + 2];
    if (center == left)
      set(center, m, 1.0);
    for (std::int64_t j = left; center > left && j <= center; ++j)
      set(j, m, static_cast<double>(j - left) / static_cast<double>(center - left));
    for (std::int64_t j = center; j < right; ++j)
      set(j, m, static_cast<double>(right - j) / static_cast<double>(right - center));
  }
  return {out.to(onnxScalarType(c.intAttr("output_datatype", 1)))};
}
} // namespace

void registerSignalKernels(KernelTable& t) {
  t.add("HannWindow", [](KernelContext& c) -> Outputs { return window(c, Window::Hann); }, hostOperands({0}));
  t.add("HammingWindow", [](KernelContext& c) -> Outputs { return window(c, Window::Hamming); }, hostOperands({0}));
  t.add("BlackmanWindow", [](KernelContext& c) -> Outputs { return window(c, Window::Blackman); }, hostOperands({0}));
  t.add("DFT", dft, hostOperands({1}));
  t.add("STFT", stft, hostOperands({1, 3}));
  t.add("MelWeightMatrix", melWeightMatrix, hostOperands({0, 1, 2, 3, 4}));
}

} // namespace cleave::runtime
