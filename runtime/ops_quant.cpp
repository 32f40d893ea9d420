// runtime/ops_quant.cpp - ONNX's linear quantization ops: QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear. Per-tensor or per-axis (a 1-D scale along `axis`); rounding is to the
// nearest even integer and results saturate to the target type, as ONNX specifies.
#include "runtime/kernel.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

// A scale or zero point shaped to broadcast against `x`: per tensor, or along `axis`.
at::Tensor alongAxis(const at::Tensor& parameter, const at::Tensor& x, std::int64_t axis) {
  if (parameter.dim() == 0 || parameter.numel() == 1)
    return parameter.reshape({});
  std::vector<std::int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
  shape[static_cast<std::size_t>(normalizeAxis(axis, x.dim()))] = parameter.numel();
  return parameter.reshape(shape);
}

at::Tensor saturate(const at::Tensor& values, at::ScalarType type) {
  double low = type == at::kByte ? 0 : type == at::kChar ? -128 : type == at::kInt ? -2147483648.0 : 0;
  double high = type == at::kByte ? 255 : type == at::kChar ? 127 : type == at::kInt ? 2147483647.0 : 255;
  return values.clamp(low, high).to(type);
}

Outputs quantize(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  std::int64_t axis = c.intAttr("axis", 1);
  at::Tensor scale = alongAxis(c.input(1).to(at::kFloat), x, axis);
  at::ScalarType type = c.has(2) ? c.input(2).scalar_type() : at::kByte;
  at::Tensor zero = c.has(2) ? alongAxis(c.input(2).to(at::kFloat), x, axis) : at::zeros({}, scale.options());
  return {saturate(at::round(x.to(at::kFloat) / scale) + zero, type)};
}

Outputs dequantize(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  std::int64_t axis = c.intAttr("axis", 1);
  at::Tensor scale = alongAxis(c.input(1).to(at::kFloat), x, axis);
  at::Tensor zero = c.has(2) ? alongAxis(c.input(2).to(at::kFloat), x, axis) : at::zeros({}, scale.options());
  return {(x.to(at::kFloat) - zero) * scale};
}

Outputs dynamicQuantize(KernelContext& c) {
  at::Tensor x = c.input(0).to(at::kFloat);
  at::Tensor low = at::minimum(x.min(), at::zeros({}, x.options()));
  at::Tensor high = at::maximum(x.max(), at::zeros({}, x.options()));
  at::Tensor scale = (high - low) / 255.0;
  at::Tensor zero = saturate(at::round(-low / scale), at::kByte);
  at::Tensor y = saturate(at::round(x / scale) + zero.to(at::kFloat), at::kByte);
  return {y, scale, zero};
}
} // namespace

void registerQuantKernels(KernelTable& t) {
  t.add("QuantizeLinear", quantize);
  t.add("DequantizeLinear", dequantize);
  t.add("DynamicQuantizeLinear", dynamicQuantize);
}

} // namespace cleave::runtime
