// runtime/ops_signal.cpp - ONNX's signal ops (opset 17) on ATen: HannWindow, HammingWindow,
// BlackmanWindow and DFT.
//
// Windows: N' = size when periodic (the default), size - 1 when symmetric; Hamming with ONNX's
// alpha = 25/46 (not torch's 0.54). DFT: real ([..., 1]) or complex ([..., 2]) input, along
// `axis`, zero-padded or cut to `dft_length`; `inverse` divides by the length (numpy's ifft);
// `onesided` keeps the first length / 2 + 1 bins. Computed in double, returned in the input's type. Output: complex as a trailing [re, im] axis.
// Cost: a window is O(size); a DFT is ATen's FFT, O(n log n) per transformed line.
#include "runtime/kernel.h"

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
  std::int64_t axis = c.intAttr("axis", 1);
  axis = axis < 0 ? axis + x.dim() : axis;
  if (axis < 0 || axis >= x.dim() - 1)
    throw KernelError("axis " + std::to_string(c.intAttr("axis", 1)) + " is out of range");
  bool inverse = c.intAttr("inverse", 0) != 0, onesided = c.intAttr("onesided", 0) != 0;
  at::ScalarType type = x.scalar_type();
  at::Tensor pairs = x.to(at::kDouble); // float's FFT leaves 1e-6 where exact bins are 0
  if (pairs.size(-1) == 1)
    pairs = at::cat({pairs, at::zeros_like(pairs)}, -1);
  at::Tensor complex = at::view_as_complex(pairs.contiguous());
  std::int64_t length = c.has(1) ? c.ints(1).at(0) : complex.size(axis);
  if (length <= 0)
    throw KernelError("dft_length must be positive");
  at::Tensor out = inverse ? at::fft_ifft(complex, length, axis) : at::fft_fft(complex, length, axis);
  if (onesided)
    out = out.slice(axis, 0, length / 2 + 1);
  return {at::view_as_real(out).contiguous().to(type)};
}
} // namespace

void registerSignalKernels(KernelTable& t) {
  t.add("HannWindow", [](KernelContext& c) -> Outputs { return window(c, Window::Hann); });
  t.add("HammingWindow", [](KernelContext& c) -> Outputs { return window(c, Window::Hamming); });
  t.add("BlackmanWindow", [](KernelContext& c) -> Outputs { return window(c, Window::Blackman); });
  t.add("DFT", dft);
}

} // namespace cleave::runtime
