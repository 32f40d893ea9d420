// runtime/cpu/onednn_support.h - what the CPU wing's oneDNN files share (onednn.cpp: the engine,
// views, weight copies, blocked activations, pooling and softmax; onednn_products.cpp;
// onednn_convolution.cpp), built only with oneDNN (onednn_absent.cpp stands in without it).
// Nothing outside runtime/cpu/ includes it.
// Complexity: O(1) per helper but for execute (the primitive's) and the copies they name.
#pragma once

#include <ATen/ATen.h>
#include <ATen/OpaqueTensorImpl.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <optional>
#include <unordered_map>

#include "runtime/cpu/onednn.h"

namespace cleave::runtime::onednn {

using Dims = dnnl::memory::dims;
using DataType = dnnl::memory::data_type;
using Tag = dnnl::memory::format_tag;

const dnnl::engine& cpuEngine();
// A dense float32 CPU tensor (not one of ATen's own mkldnn tensors, nor a blocked activation).
bool eligible(const at::Tensor& t);
// The tensor's sizes and strides as a oneDNN memory descriptor (no copy).
dnnl::memory::desc describe(const at::Tensor& t);
dnnl::memory view(const dnnl::memory::desc& desc, const at::Tensor& t);
void execute(const dnnl::primitive& primitive, const std::unordered_map<int, dnnl::memory>& args);

// A weight copy: oneDNN memory of `desc` over a buffer of its own (64-byte aligned, from the C
// library as oneDNN's own allocation would be), counted in heldWeightBytes() until the last
// holder of `owner` lets it go.
struct HeldWeight {
  std::shared_ptr<void> owner;
  dnnl::memory memory;
};
HeldWeight holdWeight(const dnnl::memory::desc& desc);

// Whether `layout` is one of oneDNN's blocked ones (dims in blocks: nChw8c, a packed product
// weight), not a permutation of plain dims.
bool hasInnerBlocks(const dnnl::memory::desc& layout);

// A 2-D (4-dim tensor) or 3-D (5-dim) convolution's or pooling's channels-last order: ATen's
// memory format and oneDNN's tag for it.
at::MemoryFormat channelsLast(std::int64_t rank);
Tag channelsLastTag(std::int64_t rank);

// A blocked activation's data: its bytes (an ATen buffer, so ATen's allocator reuses them and the
// memory statistics count them) and their oneDNN layout; and its channels-last copy once a reader
// has asked for one, so that a value with several readers that read channels-last is reordered
// once, not once per reader (it lives as long as the value).
struct BlockedData {
  at::Tensor buffer;
  dnnl::memory::desc layout;
  mutable at::Tensor channelsLastCopy;
};
const BlockedData* blockedDataOf(const at::Tensor& t);
at::Tensor blockedActivation(at::Tensor buffer, const dnnl::memory::desc& layout, at::IntArrayRef dims);
// An uninitialized float32 buffer of at least `desc`'s bytes, from ATen's allocator.
at::Tensor bufferFor(const dnnl::memory::desc& desc);

} // namespace cleave::runtime::onednn
