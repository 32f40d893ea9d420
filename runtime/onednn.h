// runtime/onednn.h - float32 matrix products on oneDNN, called directly (the same libdnnl that
// Debian's libtorch uses inside ATen).
//
// Why not ATen: this libtorch's BLAS may be a slow generic one, and ATen's mkldnn_linear
// reorders its weight into the primitive's preferred layout on every call (measured: a sixth of
// a BERT-base run). Here a product with a weight keeps the reordered weight and the primitive
// between runs, operands are read in place from ATen tensors' memory (no to_mkldnn/to_dense
// copies), and a batched product with broadcast batch dims is one primitive call.
//
// Every function returns an undefined tensor when oneDNN cannot take the operands (not built
// with it, not float32 on the CPU, a layout the primitive refuses); the caller then uses ATen.
// Complexity: the first call with a weight pays primitive creation and the weight's reorder; later
// calls only the product.
#pragma once

#include <ATen/ATen.h>

#include <memory>

namespace cleave::runtime::onednn {

// Whether this build calls oneDNN (CMake found libdnnl-dev).
bool available();

// A weight reordered once for one product shape, with its primitive (opaque to callers).
struct PackedProduct;

// x[..., K] times a 2-D weight, [K, N] or [N, K] when `weightIsNK`, plus an optional 1-D bias
// [N]. `packed` keeps the reordered weight between calls: it is rebuilt when the weight tensor
// (by identity), the row count or the bias presence changes.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, bool weightIsNK, const at::Tensor& bias,
                  std::shared_ptr<PackedProduct>& packed);

// a[..., M, K] times b[..., K, N] with numpy broadcasting of the batch dims (both rank >= 2).
at::Tensor batchedMatmul(const at::Tensor& a, const at::Tensor& b);

} // namespace cleave::runtime::onednn
