// runtime/cpu/onednn_convolution.cpp - convolutions and transposed convolutions on oneDNN, called
// directly: primitives per input shape, weights reordered once into a shared pool (and held only
// there), Winograd where it pays, fused post-ops (onednn.h; onednn_support.h).
#include "runtime/cpu/onednn_support.h"

namespace cleave::runtime::onednn {

struct ReorderedWeight {
  at::Tensor source; // the weight it was reordered from; kept referenced, so its identity stays unique
  // From the C library's heap (holdWeight). Tried: ATen's allocator, to count these copies in
  // --profile's tensor bytes; the copies made during the first run then sat among its
  // activations' blocks and peak resident memory grew 28-51 MiB on SSD300, RetinaNet, Mask R-CNN.
  std::shared_ptr<void> owner;
  dnnl::memory memory;
  dnnl::memory::desc plainDesc; // the source's dims and plain layout, to reorder it back
};

struct OnlyReorderedWeight {
  at::Tensor standIn; // a meta tensor: the weight's dims and dtype, and its identity
  at::Tensor plain;   // until `kept` exists
  std::shared_ptr<const ReorderedWeight> kept; // a copy in a layout that converts back
};

struct PackedConvolution {
  std::shared_ptr<const ReorderedWeight> weight; // for a declined one, its source alone
  // oneDNN would run it on a kernel slower than ATen's (declinesToAten): the caller runs ATen's,
  // and this entry keeps the decision for the shape, so the primitive is not made again each run.
  bool declined = false;
  std::vector<std::int64_t> inputDims;
  bool withBias = false;
  bool transposed = false; // a deconvolution (ConvTranspose)
  ConvPostOps post;
  dnnl::primitive primitive;
  // A deconvolution's bias [+ Relu], one pass over its output after it (oneDNN 2.6 runs a
  // deconvolution's own bias and post-ops in slow loops); empty without a bias.
  dnnl::primitive epilogue;
  dnnl::memory::desc src, dst;
  std::vector<std::int64_t> outputDims;
  // A convolution that reads and writes oneDNN's blocked layout (Winograd's, or a direct kernel
  // that is faster blocked: blockedDirectPays; neither has a residual): a channels-last input is
  // reordered into `blockedSrc` before it (a blocked activation in that layout is read as it is),
  // and the output out of `blockedDst` after it unless it is returned blocked.
  bool blocked = false;
  bool winograd = false;
  dnnl::memory::desc blockedSrc, blockedDst;
  dnnl::primitive toBlocked, fromBlocked;
  dnnl::memory::desc scratchpad; // the primitive's, passed on each call (user scratchpad mode)
  // The primitives' arguments (runConvolution points them at each call's tensors), made on the
  // first call. So one packed convolution is never run by two threads at once (a node's cache
  // is not).
  struct Arguments {
    bool made = false;
    dnnl::memory src, dst, bias, scratchpad, blockedSrc, blockedDst;
    std::unordered_map<int, dnnl::memory> primitive, toBlocked, fromBlocked;
  } arguments;
};

namespace {
dnnl::primitive_attr postOpsAttr(const ConvPostOps& post) {
  dnnl::post_ops ops;
  if (post.addResidual)
    ops.append_sum(1.0f);
  using A = ConvPostOps::Activation;
  switch (post.activation) {
  case A::None: break;
  case A::Relu: ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f); break;
  case A::Clip: ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, post.clipLow, post.clipHigh); break;
  case A::HardSwish: ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_hardswish, 1.0f / 6.0f, 0.5f); break;
  case A::HardSigmoid: // oneDNN 2.6 has no hard sigmoid: a linear map, then the clip
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, post.alpha, post.beta);
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, 0.0f, 1.0f);
    break;
  case A::Swish: ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f); break;
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  return attr;
}

OnlyReorderedWeight* onlyReorderedIn(const ReorderedWeights* pool, const at::Tensor& w) {
  if (!pool || !w.defined() || !w.is_meta())
    return nullptr;
  auto found = pool->onlyReordered.find(w.unsafeGetTensorImpl());
  return found == pool->onlyReordered.end() ? nullptr : found->second.get();
}

// Whether a weight in `layout` reorders back to the plain one: oneDNN's blocked layouts do (the
// direct kernels'), Winograd's transformed weights do not.
bool convertsBack(const dnnl::memory::desc& layout) { return layout.data.format_kind == dnnl_blocked; }

at::Tensor plainOf(const OnlyReorderedWeight& only) {
  if (only.plain.defined())
    return only.plain;
  at::Tensor plain = at::empty(only.standIn.sizes(), only.standIn.options().device(at::kCPU));
  dnnl::memory from = only.kept->memory;
  dnnl::memory to(only.kept->plainDesc, cpuEngine(), plain.data_ptr());
  execute(dnnl::reorder(from, to), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
  return plain;
}

// w (plain, `plainTag` over `weightDims`, or a stand-in of the pool's) in the layout `wanted`: the
// pool's copy when it holds one, else a copy reordered now (and kept in the pool, weakly). A
// stand-in's first copy that converts back is kept for good, and its plain tensor let go.
std::shared_ptr<const ReorderedWeight> reorderedWeight(ReorderedWeights* pool, const at::Tensor& w,
                                                       const Dims& weightDims, Tag plainTag,
                                                       const dnnl::memory::desc& wanted) {
  std::vector<std::weak_ptr<const ReorderedWeight>>* copies =
      pool ? &pool->byWeight[w.unsafeGetTensorImpl()] : nullptr;
  if (copies) {
    std::erase_if(*copies, [](const std::weak_ptr<const ReorderedWeight>& copy) { return copy.expired(); });
    for (const std::weak_ptr<const ReorderedWeight>& copy : *copies)
      if (std::shared_ptr<const ReorderedWeight> held = copy.lock();
          held && held->source.is_same(w) && held->memory.get_desc() == wanted)
        return held;
  }
  auto fresh = std::make_shared<ReorderedWeight>();
  fresh->source = w;
  fresh->plainDesc = dnnl::memory::desc(weightDims, DataType::f32, plainTag);
  HeldWeight copy = holdWeight(wanted);
  fresh->owner = std::move(copy.owner);
  fresh->memory = copy.memory;
  OnlyReorderedWeight* only = onlyReorderedIn(pool, w);
  {
    at::Tensor plainWeight = only ? plainOf(*only) : w.contiguous();
    dnnl::memory given(fresh->plainDesc, cpuEngine(), plainWeight.data_ptr());
    execute(dnnl::reorder(given, fresh->memory), {{DNNL_ARG_FROM, given}, {DNNL_ARG_TO, fresh->memory}});
  }
  if (only && !only->kept && convertsBack(wanted)) {
    only->kept = fresh;
    only->plain = at::Tensor();
  }
  if (copies) {
    copies->push_back(fresh);
    if (pool->byWeight.size() > pool->sweepAbove) {
      std::erase_if(pool->byWeight, [](const auto& entry) {
        return std::all_of(entry.second.begin(), entry.second.end(), [](const auto& copy) { return copy.expired(); });
      });
      pool->sweepAbove = std::max<std::size_t>(64, 2 * pool->byWeight.size());
    }
  }
  return fresh;
}

// Gives `packed` w in `wanted`, the layout the primitive picked (from `cache`'s pool), and records
// what `packed` is keyed by.
void keepReorderedWeight(PackedConvolution& packed, const at::Tensor& w, const Dims& weightDims, Tag plainTag,
                         const dnnl::memory::desc& wanted, const at::Tensor& x, bool withBias,
                         std::vector<std::int64_t> outputDims, const ConvolutionCache* cache) {
  packed.weight = reorderedWeight(cache ? cache->weights.get() : nullptr, w, weightDims, plainTag, wanted);
  packed.inputDims = x.sizes().vec();
  packed.withBias = withBias;
  packed.outputDims = std::move(outputDims);
}

// The argument maps of `packed`'s primitives, over memory objects made once without data (each
// call points them at its tensors: making them costs an allocation each, and a small model's
// convolutions made about 200 a run).
void bindArguments(PackedConvolution& packed) {
  auto unbound = [](const dnnl::memory::desc& desc) { return dnnl::memory(desc, cpuEngine(), DNNL_MEMORY_NONE); };
  PackedConvolution::Arguments& bound = packed.arguments;
  bound.src = unbound(packed.src);
  bound.dst = unbound(packed.dst);
  bound.bias = unbound(dnnl::memory::desc({packed.outputDims[1]}, DataType::f32, Tag::a));
  bound.scratchpad = unbound(packed.scratchpad);
  bound.primitive = {{DNNL_ARG_WEIGHTS, packed.weight->memory}};
  if (packed.blocked) {
    bound.blockedSrc = unbound(packed.blockedSrc);
    bound.blockedDst = unbound(packed.blockedDst);
    bound.primitive.emplace(DNNL_ARG_SRC, bound.blockedSrc);
    bound.primitive.emplace(DNNL_ARG_DST, bound.blockedDst);
    bound.toBlocked = {{DNNL_ARG_FROM, bound.src}, {DNNL_ARG_TO, bound.blockedSrc}};
    bound.fromBlocked = {{DNNL_ARG_FROM, bound.blockedDst}, {DNNL_ARG_TO, bound.dst}};
  } else {
    bound.primitive.emplace(DNNL_ARG_SRC, bound.src);
    bound.primitive.emplace(DNNL_ARG_DST, bound.dst);
  }
  if (packed.scratchpad.get_size() > 0)
    bound.primitive.emplace(DNNL_ARG_SCRATCHPAD, bound.scratchpad);
  if (packed.withBias && !packed.transposed) // a deconvolution's bias is added after it (epilogue)
    bound.primitive.emplace(DNNL_ARG_BIAS, bound.bias);
  bound.made = true;
}

// `packed`'s primitive on x plus the bias, accumulating onto the residual when it has one, and
// its output: blocked when `packed` runs blocked and `mayReturnBlocked`, else channels-last. x is
// read as it is where it is channels-last or blocked in the layout the primitive reads, otherwise
// after one reorder; a blocked residual is reordered to channels-last. Scratch memory (the
// primitive's scratchpad, blocked operands) comes from ATen's allocator, which keeps freed memory
// for reuse.
at::Tensor runConvolution(PackedConvolution& packed, const at::Tensor& x, const at::Tensor& bias,
                          const at::Tensor& residual, bool residualIsScratch, bool mayReturnBlocked) {
  if (!packed.arguments.made)
    bindArguments(packed);
  PackedConvolution::Arguments& bound = packed.arguments;
  const at::MemoryFormat lastChannels = channelsLast(x.dim());
  // The source.
  const BlockedData* blockedX = blockedDataOf(x);
  at::Tensor src;
  if (packed.blocked && blockedX && blockedX->layout == packed.blockedSrc) {
    src = blockedX->buffer;
    bound.blockedSrc.set_data_handle(src.data_ptr());
  } else {
    const at::Tensor dense = (blockedX ? denseFromBlocked(x) : x).contiguous(lastChannels);
    bound.src.set_data_handle(dense.data_ptr());
    src = dense;
    if (packed.blocked) {
      src = bufferFor(packed.blockedSrc);
      bound.blockedSrc.set_data_handle(src.data_ptr());
      execute(packed.toBlocked, bound.toBlocked);
    }
  }
  // The destination, holding the residual first when there is one (a blocked residual's
  // channels-last copy is its other readers' too, so it is copied, never accumulated onto).
  at::Tensor out;
  if (packed.blocked) {
    out = bufferFor(packed.blockedDst);
    bound.blockedDst.set_data_handle(out.data_ptr());
  } else {
    const at::Tensor denseResidual = denseFromBlocked(residual);
    if (packed.post.addResidual && residualIsScratch && !isBlockedActivation(residual) &&
        denseResidual.is_contiguous(lastChannels)) {
      out = denseResidual; // the sum post-op accumulates onto it: no copy
    } else {
      out = at::empty(packed.outputDims, at::TensorOptions(at::kFloat).memory_format(lastChannels));
      if (packed.post.addResidual)
        out.copy_(denseResidual);
    }
    bound.dst.set_data_handle(out.data_ptr());
  }
  at::Tensor scratchpad;
  if (packed.scratchpad.get_size() > 0) {
    scratchpad = bufferFor(packed.scratchpad);
    bound.scratchpad.set_data_handle(scratchpad.data_ptr());
  }
  const at::Tensor denseBias = bias.defined() ? bias.contiguous() : at::Tensor(); // [OC]
  if (denseBias.defined())
    bound.bias.set_data_handle(denseBias.data_ptr());
  execute(packed.primitive, bound.primitive);
  if (!packed.blocked)
    return out;
  if (mayReturnBlocked)
    return blockedActivation(out, packed.blockedDst, packed.outputDims);
  at::Tensor dense = at::empty(packed.outputDims, at::TensorOptions(at::kFloat).memory_format(lastChannels));
  bound.dst.set_data_handle(dense.data_ptr());
  execute(packed.fromBlocked, bound.fromBlocked);
  return dense;
}

// [N, OC, (OD,) OH, OW] of a convolution of x by w.
std::vector<std::int64_t> convolutionOutputDims(const at::Tensor& x, const at::Tensor& w,
                                                const std::vector<std::int64_t>& strides,
                                                const std::vector<std::int64_t>& padBegin,
                                                const std::vector<std::int64_t>& padEnd,
                                                const std::vector<std::int64_t>& dilations) {
  std::vector<std::int64_t> out{x.size(0), w.size(0)};
  for (std::size_t d = 0; d < strides.size(); ++d) {
    const std::int64_t in = x.size(static_cast<std::int64_t>(d) + 2), k = w.size(static_cast<std::int64_t>(d) + 2);
    out.push_back((in + padBegin[d] + padEnd[d] - dilations[d] * (k - 1) - 1) / strides[d] + 1);
  }
  return out;
}

// Whether a convolution may run as Winograd's (oneDNN's jit_fp32_wino_2x3, F(2x2, 3x3), or
// jit_wino_4x3, F(4x4, 3x3), whichever oneDNN picks) in oneDNN's blocked layout, with the reorders
// from and to channels-last around it, rather than the direct channels-last kernel: 3x3, stride 1,
// undilated, ungrouped, channels in multiples of 16 and more than 16 out, at least 14x14, no
// residual. Measured on ResNet-50's 3x3 convolutions (bench_conv_layout, AVX-512, 2 threads, two
// runs), reorders included: 11-12% faster at 56x56x64, 13-23% at 28x28x128, 24-29% at 14x14x256,
// and 0-5% slower at 7x7x512; SSD300's 512-to-16 box head at 38x38 took 2.9 ms against the direct
// kernel's 0.8 (32 outputs were mixed: DenseNet's 128-to-32 layers 9-20% faster at 14x14 and
// 28x28, Inception-v3's 32-to-32 at 147x147 41% slower; left on Winograd). Its results differ
// from the direct kernel's by rounding (the tile transforms).
bool winogradPays(const at::Tensor& x, const at::Tensor& w, const std::vector<std::int64_t>& strides,
                  const std::vector<std::int64_t>& dilations, std::int64_t groups, const ConvPostOps& post) {
  return w.dim() == 4 && w.size(2) == 3 && w.size(3) == 3 && strides[0] == 1 && strides[1] == 1 && dilations[0] == 1 &&
         dilations[1] == 1 && groups == 1 && x.size(1) % 16 == 0 && w.size(0) % 16 == 0 && w.size(0) > 16 &&
         x.size(2) >= 14 && x.size(3) >= 14 && !post.addResidual;
}

// Whether Winograd's transformed weight is worth its memory: its bytes beyond the plain weight's
// at most kWinogradExtraPerOutputByte times the output's. The saving grows with the output's
// pixels and the extra memory does not (F(4x4, 3x3) holds 36 values per 9 of the weight, F(2x2,
// 3x3) 16), so this keeps Winograd where its work is large for the memory. SSD300 (VGG's 512x512
// weights, F(4x4, 3x3)): at 19x19 (ratio 38) three layers saved 6.5 ms a run for 85 MiB of copies;
// at 38x38 (ratio 9.6) two saved 19 ms for 57 MiB; at 75x75 (1.2) two saved 22 ms for 14 MiB.
// VGG-11's 512x512 layers (ratios 17.7 at 28x28, F(4x4, 3x3), and 18.3 at 14x14, F(2x2, 3x3))
// ran 3.3x and 3.7x slower on the direct kernel: a limit of 16 cost VGG-11 a third of its speed,
// so the limit is 32. ResNet-50's F(2x2, 3x3) layers are at most 9.2 (14x14x256).
constexpr std::size_t kWinogradExtraPerOutputByte = 32;
bool winogradWeightAffordable(const dnnl::convolution_forward::primitive_desc& winograd, const at::Tensor& w,
                              const std::vector<std::int64_t>& outputDims) {
  const std::size_t plain = static_cast<std::size_t>(w.numel()) * sizeof(float);
  const std::size_t transformed = winograd.weights_desc().get_size();
  const std::size_t output = static_cast<std::size_t>(
      std::accumulate(outputDims.begin(), outputDims.end(), std::int64_t{1}, std::multiplies<>()) * sizeof(float));
  return transformed <= plain || transformed - plain <= kWinogradExtraPerOutputByte * output;
}

// Whether a direct convolution may run in oneDNN's blocked layout with reorders from and to
// channels-last around it (where its channels-last kernel is not a native one:
// directInPreferredLayout): a 2-D, ungrouped convolution with a kernel larger than 1x1 and no
// residual. Measured on an AMD EPYC (AVX2, oneDNN 2.6's jit:avx2, nChw8c against nhwc; 2
// threads): bench_conv_layout's ResNet-50 trunk all blocked 0.85x channels-last, its 3x3 layers
// 0.64-0.87x; end to end, in pairs in one process (cleave run --baseline), FCOS 0.91x and
// ResNet-50 0.98-0.99x with these blocked; with the 1x1 ones too ResNet-50 took 1.11x (their
// kernels gain 2-4%, less than the reorders cost).
// The choice is the convolution's shape's alone, never its input's layout: a cut model's
// convolution after a seam reads a channels-last value where the whole model's read a blocked
// one, and the two must run the same kernel to give the same sums. (Running the 1x1 ones blocked
// whenever their input was blocked made a cut ResNet-50 differ from the whole one by 4.5e-4 of
// an output's magnitude, past `cleave verify`'s tolerance, and gained nothing: the 1x1 kernels
// took 26.2 ms a run blocked against 26.1 channels-last.)
bool blockedDirectPays(const at::Tensor& x, const at::Tensor& w, std::int64_t groups, const ConvPostOps& post) {
  return x.dim() == 4 && groups == 1 && !post.addResidual && (w.size(2) > 1 || w.size(3) > 1);
}

// The direct convolution with its source and destination in the layouts oneDNN prefers, where
// the destination's is blocked and `channelsLast` (the same convolution channels-last) is not one
// of its native channels-last kernels (brgconv, AVX-512); else nothing (the caller runs
// `channelsLast`). The source's may be plain: an image's 3 channels fill no block, and jit:avx2
// reads them as nchw and writes nChw8c (VGG-11's first layer 1.31 ms against 1.48 channels-last,
// and the max pool after it, on the blocked output, 1.8-2.1 ms against 2.6-3.8).
template <typename Describe>
std::optional<dnnl::convolution_forward::primitive_desc>
directInPreferredLayout(const Describe& describeConvolution, const dnnl::primitive_attr& attr,
                        const dnnl::convolution_forward::primitive_desc& channelsLast) {
  if (std::string_view(channelsLast.impl_info_str()).rfind("brg", 0) == 0)
    return std::nullopt;
  try {
    dnnl::convolution_forward::primitive_desc preferred(
        describeConvolution(dnnl::algorithm::convolution_direct,
                            dnnl::memory::desc(channelsLast.src_desc().dims(), DataType::f32, Tag::any),
                            dnnl::memory::desc(channelsLast.dst_desc().dims(), DataType::f32, Tag::any)),
        attr, cpuEngine());
    if (!hasInnerBlocks(preferred.dst_desc()))
      return std::nullopt;
    return preferred;
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

// Whether a depthwise convolution (one input channel per group) would run on oneDNN 2.6's gemm
// kernel, its fallback where no depthwise kernel takes the shape (ConvNeXt's last stage at 64x64:
// a 7x7 window over a 2x2 image, padded by 3): 0.41 ms a call there, where ATen's channels-last
// depthwise kernel takes about 0.1 (bench/RESULTS.md, session 52).
bool declinesToAten(const dnnl::convolution_forward::primitive_desc& pd, const at::Tensor& w, std::int64_t groups) {
  return groups > 1 && w.size(1) == 1 && std::string_view(pd.impl_info_str()).find("gemm") != std::string_view::npos;
}

// The convolution for x's dims: the primitive (oneDNN picks the weight layout), the weight
// reordered into it once; or, where it declines (declinesToAten), the decision alone.
std::shared_ptr<PackedConvolution> packConvolution(const at::Tensor& x, const at::Tensor& w, bool withBias,
                                                   const std::vector<std::int64_t>& strides,
                                                   const std::vector<std::int64_t>& padBegin,
                                                   const std::vector<std::int64_t>& padEnd,
                                                   const std::vector<std::int64_t>& dilations, std::int64_t groups,
                                                   const ConvPostOps& post, const ConvolutionCache* cache) {
  auto packed = std::make_shared<PackedConvolution>();
  const std::int64_t oc = w.size(0);
  const std::vector<std::int64_t> out = convolutionOutputDims(x, w, strides, padBegin, padEnd, dilations);
  Dims weightDims(w.sizes().begin(), w.sizes().end());
  if (groups > 1) { // (groups, OC / groups, IC / groups, spatial...)
    weightDims[0] = oc / groups;
    weightDims.insert(weightDims.begin(), groups);
  }
  packed->src = dnnl::memory::desc(Dims(x.sizes().begin(), x.sizes().end()), DataType::f32, channelsLastTag(x.dim()));
  packed->dst = dnnl::memory::desc(Dims(out.begin(), out.end()), DataType::f32, channelsLastTag(x.dim()));
  const dnnl::memory::desc anyWeight(weightDims, DataType::f32, Tag::any), biasDesc({oc}, DataType::f32, Tag::a);
  Dims dilates;
  for (const std::int64_t dilation : dilations)
    dilates.push_back(dilation - 1);
  auto describeConvolution = [&](dnnl::algorithm algorithm, const dnnl::memory::desc& src,
                                 const dnnl::memory::desc& dst) {
    return withBias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, algorithm, src, anyWeight,
                                                      biasDesc, dst, Dims(strides.begin(), strides.end()), dilates,
                                                      Dims(padBegin.begin(), padBegin.end()),
                                                      Dims(padEnd.begin(), padEnd.end()))
                    : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, algorithm, src, anyWeight,
                                                      dst, Dims(strides.begin(), strides.end()), dilates,
                                                      Dims(padBegin.begin(), padBegin.end()),
                                                      Dims(padEnd.begin(), padEnd.end()));
  };
  // The primitive's scratchpad (Winograd's transformed tiles: 33 MiB over ResNet-50's when each
  // primitive held its own) comes from ATen's allocator on each call, which keeps freed memory.
  dnnl::primitive_attr attr = postOpsAttr(post);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  std::optional<dnnl::convolution_forward::primitive_desc> winograd;
  if ((!cache || cache->allowWinograd) && winogradPays(x, w, strides, dilations, groups, post)) {
    packed->blockedSrc = dnnl::memory::desc(packed->src.dims(), DataType::f32, Tag::nChw16c);
    packed->blockedDst = dnnl::memory::desc(packed->dst.dims(), DataType::f32, Tag::nChw16c);
    try {
      winograd.emplace(
          describeConvolution(dnnl::algorithm::convolution_winograd, packed->blockedSrc, packed->blockedDst), attr,
          cpuEngine());
    } catch (const dnnl::error&) {
      // this CPU or oneDNN has no Winograd kernel for it: the direct one below
    }
    if (winograd && !winogradWeightAffordable(*winograd, w, out))
      winograd.reset();
  }
  std::optional<dnnl::convolution_forward::primitive_desc> blockedDirect, channelsLast;
  if (!winograd) { // the channels-last kernel; the blocked one instead where that is not native
    channelsLast.emplace(describeConvolution(dnnl::algorithm::convolution_direct, packed->src, packed->dst), attr,
                         cpuEngine());
    if ((!cache || cache->allowBlockedDirect) && blockedDirectPays(x, w, groups, post))
      blockedDirect = directInPreferredLayout(describeConvolution, attr, *channelsLast);
    if (blockedDirect) {
      packed->blockedSrc = blockedDirect->src_desc();
      packed->blockedDst = blockedDirect->dst_desc();
    }
  }
  const dnnl::convolution_forward::primitive_desc& pd =
      winograd ? *winograd : blockedDirect ? *blockedDirect : *channelsLast;
  if (declinesToAten(pd, w, groups)) {
    auto source = std::make_shared<ReorderedWeight>();
    source->source = w;
    packed->weight = std::move(source);
    packed->declined = true;
    packed->inputDims = x.sizes().vec();
    packed->withBias = withBias;
    packed->post = post;
    return packed;
  }
  packed->scratchpad = pd.scratchpad_desc();
  if (winograd || blockedDirect) {
    packed->blocked = true;
    packed->winograd = winograd.has_value();
    packed->toBlocked = dnnl::reorder(dnnl::reorder::primitive_desc(cpuEngine(), packed->src, cpuEngine(),
                                                                     packed->blockedSrc));
    packed->fromBlocked = dnnl::reorder(dnnl::reorder::primitive_desc(cpuEngine(), packed->blockedDst, cpuEngine(),
                                                                       packed->dst));
  }
  const Tag plainWeight = x.dim() == 5 ? (groups > 1 ? Tag::goidhw : Tag::oidhw) : (groups > 1 ? Tag::goihw : Tag::oihw);
  keepReorderedWeight(*packed, w, weightDims, plainWeight, pd.weights_desc(), x, withBias, out, cache);
  packed->primitive = dnnl::convolution_forward(pd);
  packed->post = post;
  return packed;
}
} // namespace

at::Tensor convolution(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                       const std::vector<std::int64_t>& strides, const std::vector<std::int64_t>& padBegin,
                       const std::vector<std::int64_t>& padEnd, const std::vector<std::int64_t>& dilations,
                       std::int64_t groups, const ConvPostOps& post, const at::Tensor& residual,
                       bool residualIsScratch, std::shared_ptr<PackedConvolution>& packed,
                       const ConvolutionCache* cache, bool mayReturnBlocked) {
  const bool heldOnlyReordered = cache && onlyReorderedIn(cache->weights.get(), w);
  const bool inputBlocked = isBlockedActivation(x);
  if (!(eligible(x) || inputBlocked) || !(eligible(w) || heldOnlyReordered) || (x.dim() != 4 && x.dim() != 5) ||
      w.dim() != x.dim())
    return {};
  const std::size_t spatial = static_cast<std::size_t>(x.dim()) - 2;
  if (x.numel() == 0 || groups < 1 || x.size(1) != w.size(1) * groups || w.size(0) % groups != 0 || strides.size() != spatial ||
      padBegin.size() != spatial || padEnd.size() != spatial || dilations.size() != spatial ||
      (bias.defined() && (!eligible(bias) || bias.numel() != w.size(0))) ||
      (post.addResidual && !(eligible(residual) || isBlockedActivation(residual))))
    return {};
  // A residual of another shape (a broadcast Add) is refused before the cache is touched, so the
  // caller's plain convolution keeps its own primitive instead of rebuilding it every run.
  if (post.addResidual && residual.sizes().vec() != convolutionOutputDims(x, w, strides, padBegin, padEnd, dilations))
    return {};
  try {
    if (!packed || packed->transposed || !packed->weight->source.is_same(w) || packed->inputDims != x.sizes().vec() ||
        packed->withBias != bias.defined() || !(packed->post == post))
      packed = packConvolution(x, w, bias.defined(), strides, padBegin, padEnd, dilations, groups, post, cache);
    if (packed->declined)
      return {};
    return runConvolution(*packed, x, bias, residual, residualIsScratch, mayReturnBlocked);
  } catch (const dnnl::error&) {
    packed.reset();
    return {};
  }
}

bool usesWinograd(const PackedConvolution& packed) { return packed.winograd; }

bool runsBlocked(const PackedConvolution& packed) { return packed.blocked; }

at::Tensor holdOnlyReordered(ReorderedWeights& pool, const at::Tensor& w) {
  if (!eligible(w) || (w.dim() != 4 && w.dim() != 5) || !w.is_contiguous())
    return {};
  auto only = std::make_shared<OnlyReorderedWeight>();
  only->standIn = at::empty(w.sizes(), w.options().device(at::kMeta));
  only->plain = w;
  pool.onlyReordered.emplace(only->standIn.unsafeGetTensorImpl(), only);
  return only->standIn;
}

at::Tensor plainWeight(const ReorderedWeights& pool, const at::Tensor& standIn) {
  const OnlyReorderedWeight* only = onlyReorderedIn(&pool, standIn);
  return only ? plainOf(*only) : at::Tensor();
}

std::size_t releasedPlainWeights(const ReorderedWeights& pool) {
  return static_cast<std::size_t>(std::count_if(pool.onlyReordered.begin(), pool.onlyReordered.end(),
                                                [](const auto& entry) { return !entry.second->plain.defined(); }));
}

std::size_t reorderedWeightBytes(const PackedConvolution& packed) { return packed.weight->memory.get_desc().get_size(); }

bool shareReorderedWeight(const PackedConvolution& a, const PackedConvolution& b) {
  return a.weight == b.weight;
}

std::shared_ptr<PackedConvolution>& cacheEntryFor(ConvolutionCache& cache, at::IntArrayRef inputDims) {
  std::shared_ptr<PackedConvolution>* empty = nullptr;
  for (std::shared_ptr<PackedConvolution>& entry : cache.byShape) {
    if (entry && inputDims.equals(entry->inputDims))
      return entry;
    if (!entry && !empty)
      empty = &entry;
  }
  if (empty)
    return *empty;
  if (cache.byShape.size() >= ConvolutionCache::kMaxShapes)
    cache.byShape.erase(cache.byShape.begin());
  return cache.byShape.emplace_back();
}

namespace {
// [N, OC, OH, OW] of a 2-D transposed convolution of x by w [IC, OC / groups, KH, KW] (ONNX's
// ConvTranspose output size with explicit pads).
std::vector<std::int64_t> transposedOutputDims(const at::Tensor& x, const at::Tensor& w, std::int64_t groups,
                                               const std::vector<std::int64_t>& strides,
                                               const std::vector<std::int64_t>& padBegin,
                                               const std::vector<std::int64_t>& padEnd,
                                               const std::vector<std::int64_t>& dilations,
                                               const std::vector<std::int64_t>& outputPadding) {
  std::vector<std::int64_t> out{x.size(0), w.size(1) * groups};
  for (std::size_t d = 0; d < 2; ++d) {
    const std::int64_t in = x.size(static_cast<std::int64_t>(d) + 2), k = w.size(static_cast<std::int64_t>(d) + 2);
    out.push_back(strides[d] * (in - 1) + outputPadding[d] + dilations[d] * (k - 1) + 1 - padBegin[d] - padEnd[d]);
  }
  return out;
}

// The deconvolution for x's dims: the primitive (oneDNN picks the weight layout), the weight
// reordered into it once. ONNX's output_padding is less end padding for oneDNN.
std::shared_ptr<PackedConvolution> packTransposedConvolution(
    const at::Tensor& x, const at::Tensor& w, bool withBias, const std::vector<std::int64_t>& strides,
    const std::vector<std::int64_t>& padBegin, const std::vector<std::int64_t>& padEnd,
    const std::vector<std::int64_t>& dilations, const std::vector<std::int64_t>& outputPadding, std::int64_t groups,
    const ConvPostOps& post, const ConvolutionCache* cache) {
  auto packed = std::make_shared<PackedConvolution>();
  const std::int64_t ic = w.size(0), oc = w.size(1) * groups;
  const std::vector<std::int64_t> out =
      transposedOutputDims(x, w, groups, strides, padBegin, padEnd, dilations, outputPadding);
  // Logical oneDNN weight dims are (groups,) OC, IC; ONNX stores [IC, OC / groups, KH, KW], which
  // is oneDNN's (g)iohw order.
  const Dims weightDims = groups > 1 ? Dims{groups, oc / groups, ic / groups, w.size(2), w.size(3)}
                                     : Dims{oc, ic, w.size(2), w.size(3)};
  packed->src = dnnl::memory::desc(Dims(x.sizes().begin(), x.sizes().end()), DataType::f32, Tag::nhwc);
  packed->dst = dnnl::memory::desc(Dims(out.begin(), out.end()), DataType::f32, Tag::nhwc);
  const dnnl::memory::desc anyWeight(weightDims, DataType::f32, Tag::any);
  const Dims dilates{dilations[0] - 1, dilations[1] - 1}, stride(strides.begin(), strides.end()),
      left(padBegin.begin(), padBegin.end()), right{padEnd[0] - outputPadding[0], padEnd[1] - outputPadding[1]};
  using Deconvolution = dnnl::deconvolution_forward;
  Deconvolution::primitive_desc pd(Deconvolution::desc(dnnl::prop_kind::forward_inference,
                                                       dnnl::algorithm::deconvolution_direct, packed->src, anyWeight,
                                                       packed->dst, stride, dilates, left, right),
                                   cpuEngine());
  keepReorderedWeight(*packed, w, weightDims, groups > 1 ? Tag::giohw : Tag::iohw, pd.weights_desc(), x, withBias,
                      out, cache);
  packed->primitive = Deconvolution(pd);
  packed->post = post;
  if (withBias) { // output += bias per channel, then the activation, in place
    const dnnl::memory::desc perChannel({1, oc, 1, 1}, DataType::f32, Tag::nchw);
    packed->epilogue = dnnl::binary(dnnl::binary::primitive_desc(
        dnnl::binary::desc(dnnl::algorithm::binary_add, packed->dst, perChannel, packed->dst), postOpsAttr(post),
        cpuEngine()));
  }
  packed->transposed = true;
  return packed;
}
} // namespace

at::Tensor transposedConvolution2d(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                                   const std::vector<std::int64_t>& strides, const std::vector<std::int64_t>& padBegin,
                                   const std::vector<std::int64_t>& padEnd, const std::vector<std::int64_t>& dilations,
                                   const std::vector<std::int64_t>& outputPadding, std::int64_t groups,
                                   bool thenRelu, std::shared_ptr<PackedConvolution>& packed,
                                   const ConvolutionCache* cache) {
  const bool heldOnlyReordered = cache && onlyReorderedIn(cache->weights.get(), w);
  if (!eligible(x) || !(eligible(w) || heldOnlyReordered) || x.dim() != 4 || w.dim() != 4 || x.numel() == 0 ||
      w.numel() == 0 || groups < 1 || x.size(1) != w.size(0) || w.size(0) % groups != 0 || strides.size() != 2 ||
      padBegin.size() != 2 || padEnd.size() != 2 || dilations.size() != 2 || outputPadding.size() != 2 ||
      (bias.defined() && (!eligible(bias) || bias.numel() != w.size(1) * groups)))
    return {};
  for (std::size_t d = 0; d < 2; ++d)
    if (strides[d] < 1 || dilations[d] < 1 || padBegin[d] < 0 || padEnd[d] - outputPadding[d] < 0)
      return {}; // negative padding (a crop past the edge, or extra zero rows): ATen's path
  const std::vector<std::int64_t> out =
      transposedOutputDims(x, w, groups, strides, padBegin, padEnd, dilations, outputPadding);
  if (out[2] < 1 || out[3] < 1)
    return {};
  try {
    const ConvPostOps post{false, thenRelu ? ConvPostOps::Activation::Relu : ConvPostOps::Activation::None};
    if (!packed || !packed->transposed || !packed->weight->source.is_same(w) || packed->inputDims != x.sizes().vec() ||
        packed->outputDims != out || packed->withBias != bias.defined() || !(packed->post == post))
      packed = packTransposedConvolution(x, w, bias.defined(), strides, padBegin, padEnd, dilations, outputPadding,
                                         groups, post, cache);
    at::Tensor result = runConvolution(*packed, x, at::Tensor(), at::Tensor(), false, false); // channels-last
    if (bias.defined()) {
      const dnnl::memory dst = view(packed->dst, result);
      execute(packed->epilogue, {{DNNL_ARG_SRC_0, dst},
                                 {DNNL_ARG_SRC_1, view(dnnl::memory::desc({1, result.size(1), 1, 1}, DataType::f32,
                                                                          Tag::nchw),
                                                       bias.contiguous())},
                                 {DNNL_ARG_DST, dst}});
    } else if (thenRelu) {
      result.relu_();
    }
    return result;
  } catch (const dnnl::error&) {
    packed.reset();
    return {};
  }
}

} // namespace cleave::runtime::onednn
