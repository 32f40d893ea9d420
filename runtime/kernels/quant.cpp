// runtime/kernels/quant.cpp - ONNX's linear quantization ops: QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, and the integer products ConvInteger, MatMulInteger, QLinearConv,
// QLinearMatMul. Per-tensor or per-axis (a 1-D scale along `axis`); rounding is to the nearest
// even integer and results saturate to the target type, as ONNX specifies. Integer products
// accumulate in float64, exact for 8-bit operands up to 2^37 terms per output.
#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

// A scale or zero point shaped to broadcast against `x`: per tensor, along `axis` (1-D), or per
// block of `blockSize` elements along `axis` (opset 21: the parameter has x's rank, and its dim
// along axis counts the blocks, the last one possibly short).
at::Tensor alongAxis(const at::Tensor& parameter, const at::Tensor& x, std::int64_t axis, std::int64_t blockSize = 0) {
  if (parameter.dim() == 0 || parameter.numel() == 1)
    return parameter.reshape({});
  const std::int64_t a = normalizeAxis(axis, x.dim());
  if (blockSize > 0 && parameter.dim() == x.dim())
    return parameter.repeat_interleave(blockSize, a).narrow(a, 0, x.size(a));
  std::vector<std::int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
  shape[static_cast<std::size_t>(a)] = parameter.numel();
  return parameter.reshape(shape);
}

// An integer type's range as ONNX declares it (cleave holds uint16 in int32, uint32 in int64).
std::pair<double, double> integerRange(ir::DType type) {
  switch (type) {
  case ir::DType::U8: return {0, 255};
  case ir::DType::I8: return {-128, 127};
  case ir::DType::U16: return {0, 65535};
  case ir::DType::I16: return {-32768, 32767};
  case ir::DType::I32: return {-2147483648.0, 2147483647.0};
  case ir::DType::U32: return {0, 4294967295.0};
  default: throw KernelError("quantizing to " + std::string(ir::dtypeName(type)) + " is not supported");
  }
}

at::Tensor saturate(const at::Tensor& values, ir::DType type) {
  auto [low, high] = integerRange(type);
  return values.clamp(low, high).to(onnxScalarType(static_cast<std::int64_t>(type)));
}

// The type a quantization produces: its zero point's, else output_dtype (opset 21), else uint8.
ir::DType quantizedType(KernelContext& c) {
  if (c.has(2))
    return c.graph().dtype(c.graph().inputs(c.node())[2]);
  std::optional<ir::DType> declared = ir::dtypeFromOnnx(static_cast<int>(c.intAttr("output_dtype", 0)));
  return declared && *declared != ir::DType::Undefined ? *declared : ir::DType::U8;
}

Outputs quantize(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  const std::int64_t axis = c.intAttr("axis", 1), block = c.intAttr("block_size", 0);
  at::Tensor scale = alongAxis(c.input(1).to(at::kFloat), x, axis, block);
  const ir::DType type = quantizedType(c);
  at::Tensor zero = c.has(2) ? alongAxis(c.input(2).to(at::kFloat), x, axis, block) : at::zeros({}, scale.options());
  at::Tensor scaled = x.to(at::kFloat) / scale;
  if (ir::isFloat8(type)) // no rounding to integers: the cast rounds, saturating unless told not to
    return {castTo(scaled + zero, type, c.intAttr("saturate", 1) != 0)};
  return {saturate(at::round(scaled) + zero, type)};
}

Outputs dequantize(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  const std::int64_t axis = c.intAttr("axis", 1), block = c.intAttr("block_size", 0);
  at::Tensor scale = alongAxis(c.input(1).to(at::kFloat), x, axis, block);
  at::Tensor zero = c.has(2) ? alongAxis(c.input(2).to(at::kFloat), x, axis, block) : at::zeros({}, scale.options());
  at::Tensor y = (x.to(at::kFloat) - zero) * scale;
  // The result has the scale's type (opset 19), or output_dtype's (opset 23).
  std::optional<ir::DType> declared = ir::dtypeFromOnnx(static_cast<int>(c.intAttr("output_dtype", 0)));
  return {y.to(declared && *declared != ir::DType::Undefined ? onnxScalarType(static_cast<std::int64_t>(*declared))
                                                             : c.input(1).scalar_type())};
}

Outputs dynamicQuantize(KernelContext& c) {
  at::Tensor x = c.input(0).to(at::kFloat);
  at::Tensor low = at::minimum(x.min(), at::zeros({}, x.options()));
  at::Tensor high = at::maximum(x.max(), at::zeros({}, x.options()));
  at::Tensor scale = (high - low) / 255.0;
  at::Tensor zero = saturate(at::round(-low / scale), ir::DType::U8);
  at::Tensor y = saturate(at::round(x / scale) + zero.to(at::kFloat), ir::DType::U8);
  return {y, scale, zero};
}
// An 8-bit operand minus its zero point (absent: 0), in float64. A 1-D zero point of several
// entries applies along `axis` (a matrix's rows, a weight's output channels).
at::Tensor centered(KernelContext& c, std::size_t operand, std::size_t zeroPoint, std::int64_t axis) {
  at::Tensor x = c.input(operand).to(at::kDouble);
  if (!c.has(zeroPoint))
    return x;
  return x - alongAxis(c.input(zeroPoint).to(at::kDouble), x, axis);
}

// A product's accumulator requantized: round(acc * scale / outScale) + outZero, saturated to the
// output zero point's type (uint8 when absent). `scale` may be per output channel along `axis`.
at::Tensor requantize(KernelContext& c, const at::Tensor& acc, const at::Tensor& scale, std::size_t outScale,
                      std::size_t outZero, std::int64_t axis) {
  at::Tensor multiplier = alongAxis(scale.to(at::kFloat), acc, axis) / c.input(outScale).to(at::kFloat).reshape({});
  at::Tensor y = at::round(acc.to(at::kFloat) * multiplier);
  if (!c.has(outZero))
    return saturate(y, ir::DType::U8);
  return saturate(y + c.input(outZero).to(at::kFloat).reshape({}), c.graph().dtype(c.graph().inputs(c.node())[outZero]));
}

Outputs convInteger(KernelContext& c) {
  return {convolution(c, centered(c, 0, 2, 1), centered(c, 1, 3, 0), at::Tensor()).to(at::kInt)};
}

Outputs matmulInteger(KernelContext& c) {
  // a's zero point is per row (axis -2 of a), b's per column (axis -1 of b).
  at::Tensor a = centered(c, 0, 2, -2), b = centered(c, 1, 3, -1);
  return {at::matmul(a, b).to(at::kInt)};
}

// QLinearConv(x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, B): B is int32 at scale
// x_scale * w_scale.
Outputs qlinearConv(KernelContext& c) {
  at::Tensor acc = convolution(c, centered(c, 0, 2, 1), centered(c, 3, 5, 0), at::Tensor());
  if (c.has(8))
    acc = acc + alongAxis(c.input(8).to(at::kDouble), acc, 1);
  at::Tensor scale = c.input(1).to(at::kFloat).reshape({}) * c.input(4).to(at::kFloat);
  return {requantize(c, acc, scale, 6, 7, 1)};
}

// QLinearMatMul(a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero).
Outputs qlinearMatmul(KernelContext& c) {
  at::Tensor acc = at::matmul(centered(c, 0, 2, -2), centered(c, 3, 5, -1));
  at::Tensor scale = c.input(1).to(at::kFloat).reshape({}) * c.input(4).to(at::kFloat).reshape({});
  return {requantize(c, acc, scale, 6, 7, -1)};
}
} // namespace

void registerQuantKernels(KernelTable& t) {
  t.add("QuantizeLinear", quantize);
  t.add("DequantizeLinear", dequantize);
  t.add("DynamicQuantizeLinear", dynamicQuantize);
  t.add("ConvInteger", convInteger);
  t.add("MatMulInteger", matmulInteger);
  t.add("QLinearConv", qlinearConv);
  t.add("QLinearMatMul", qlinearMatmul);
}

} // namespace cleave::runtime
