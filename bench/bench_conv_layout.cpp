// bench/bench_conv_layout.cpp - ResNet-50's convolutions on oneDNN 2.6 in four arrangements:
// why cleave keeps activations channels-last and runs the 3x3 stride-1 convolutions as
// Winograd's, reordered around them (onednn::convolution).
//
// Every side runs the same network at batch 1, 224x224, float32: the 7x7 stem with its Relu, the
// 3x3 max pool, and the 16 bottleneck blocks (1x1 + Relu, 3x3 + Relu with torchvision's stride on
// the 3x3, 1x1 accumulated onto the shortcut + Relu; the first block of each stage with a strided
// 1x1 projection). Each value is the previous primitive's output (chained as in the model), every
// weight is in the primitive's own layout (Tag::any), reordered once. The sides:
//   nhwc       activations channels-last, direct kernels (cleave before Winograd)
//   blocked    activations in the layout the primitives prefer (nChw16c on AVX-512), direct
//   winograd   blocked, with the 3x3 stride-1 convolutions as Winograd's F(2x2, 3x3)
//              (oneDNN's jit_fp32_wino_2x3)
//   wino-nhwc  channels-last, the 3x3 stride-1 convolutions as Winograd's on nChw16c with a reorder
//              in and out of each (what cleave runs)
// Rounds interleave the sides, the order reversed every other round. Prints each side's median
// milliseconds per network with its ratio to nhwc per round [min, max], then per layer kind the
// milliseconds of a pass that waits after each primitive.
// usage: bench_conv_layout [--rounds R] [--repeat N]
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/bench_timing.h"

namespace {
using dnnl::memory;
using Tag = memory::format_tag;
using DataType = memory::data_type;

dnnl::engine& engine() {
  static dnnl::engine cpu(dnnl::engine::kind::cpu, 0);
  return cpu;
}

dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

memory filled(const memory::desc& desc, float value) {
  memory m(desc, engine());
  float* data = static_cast<float*>(m.get_data_handle());
  std::fill(data, data + desc.get_size() / sizeof(float), value);
  return m;
}

// One primitive call with its bound arguments, and the label of its layer kind.
struct Step {
  std::string kind;
  dnnl::primitive primitive;
  std::unordered_map<int, memory> args;
};

// A network built in one activation layout: the steps in order.
class Network {
public:
  // `winograd`: 3x3 stride-1 convolutions as Winograd's; `reorderAround`: those read and write
  // nChw16c, reordered from and to the channels-last activations around them.
  Network(bool blocked, bool winograd, bool reorderAround = false)
      : blocked_(blocked), winograd_(winograd), reorderAround_(reorderAround) {}

  // The input image as the stem reads it: plain NCHW as the model's input arrives, reordered to
  // channels-last on the nhwc side (cleave's copy; oneDNN 2.6 has only a reference kernel for an
  // NCHW source with a channels-last destination). The blocked side's stem reads NCHW.
  memory input(memory::dim channels, memory::dim size) {
    memory image = filled(memory::desc({1, channels, size, size}, DataType::f32, Tag::nchw), 0.5f);
    if (blocked_)
      return image;
    memory channelsLast(memory::desc({1, channels, size, size}, DataType::f32, Tag::nhwc), engine());
    steps_.push_back(
        Step{"input reorder", dnnl::reorder(image, channelsLast), {{DNNL_ARG_FROM, image}, {DNNL_ARG_TO, channelsLast}}});
    return channelsLast;
  }

  // A convolution of `src` to `outChannels`, then the accumulation onto `sumOnto` (when given)
  // and Relu (when asked). Returns the output memory.
  memory conv(const std::string& kind, const memory& src, memory::dim outChannels, memory::dim kernel,
              memory::dim stride, bool relu, const memory* sumOnto = nullptr) {
    const bool channelsLast = src.get_desc() == memory::desc(src.get_desc().dims(), DataType::f32, Tag::nhwc);
    if (reorderAround_ && kernel == 3 && stride == 1 && channelsLast) {
      const memory blockedSrc = reordered(kind, src, Tag::nChw16c);
      return reordered(kind, conv(kind, blockedSrc, outChannels, kernel, stride, relu, sumOnto), Tag::nhwc);
    }
    const memory::dims srcDims = src.get_desc().dims();
    const memory::dim pad = kernel / 2;
    const memory::dim outSize = (srcDims[2] + 2 * pad - kernel) / stride + 1;
    const memory::dims dstDims{srcDims[0], outChannels, outSize, outSize};
    const memory::desc srcDesc = src.get_desc(); // the producer's layout, as a kept layout would be
    const bool wino = winograd_ && kernel == 3 && stride == 1;
    const memory::desc dstDesc = sumOnto                ? sumOnto->get_desc()
                                 : reorderAround_ && wino ? memory::desc(dstDims, DataType::f32, Tag::nChw16c)
                                                          : activation(dstDims);
    const memory::desc weights({outChannels, srcDims[1], kernel, kernel}, DataType::f32, Tag::any);
    const memory::desc bias({outChannels}, DataType::f32, Tag::a);
    dnnl::post_ops ops;
    if (sumOnto)
      ops.append_sum(1.0f);
    if (relu)
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    using Conv = dnnl::convolution_forward;
    Conv::primitive_desc pd(Conv::desc(dnnl::prop_kind::forward_inference,
                                       wino ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct,
                                       srcDesc, weights, bias, dstDesc, {stride, stride}, {pad, pad}, {pad, pad}),
                            attr, engine());
    memory dst = sumOnto ? *sumOnto : memory(pd.dst_desc(), engine());
    steps_.push_back(Step{kind, Conv(pd),
                          {{DNNL_ARG_SRC, src},
                           {DNNL_ARG_WEIGHTS, filled(pd.weights_desc(), 0.001f)},
                           {DNNL_ARG_BIAS, filled(bias, 0.0f)},
                           {DNNL_ARG_DST, dst}}});
    return dst;
  }

  memory maxPool(const memory& src) {
    const memory::dims srcDims = src.get_desc().dims();
    const memory::dim outSize = (srcDims[2] + 2 - 3) / 2 + 1;
    using Pool = dnnl::pooling_forward;
    Pool::primitive_desc pd(Pool::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_max,
                                       src.get_desc(), activation({srcDims[0], srcDims[1], outSize, outSize}),
                                       {2, 2}, {3, 3}, {1, 1}, {1, 1}),
                            engine());
    memory dst(pd.dst_desc(), engine());
    steps_.push_back(Step{"maxpool", Pool(pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}});
    return dst;
  }

  // `src` reordered to `tag`, timed under `kind`.
  memory reordered(const std::string& kind, const memory& src, Tag tag) {
    memory dst(memory::desc(src.get_desc().dims(), DataType::f32, tag), engine());
    steps_.push_back(Step{kind + " reorders", dnnl::reorder(src, dst), {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}}});
    return dst;
  }

  // A copy of `src` (the shortcut that the block's last convolution accumulates onto).
  memory copy(const memory& src) {
    memory dst(src.get_desc(), engine());
    steps_.push_back(Step{"shortcut copy", dnnl::reorder(src, dst), {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}}});
    return dst;
  }

  void run(std::unordered_map<std::string, double>* perKind = nullptr) {
    for (Step& step : steps_) {
      const auto start = std::chrono::steady_clock::now();
      step.primitive.execute(stream(), step.args);
      if (perKind) {
        stream().wait();
        (*perKind)[step.kind] += cleave::bench::secondsSince(start);
      }
    }
    stream().wait();
  }

private:
  memory::desc activation(const memory::dims& dims) const {
    return memory::desc(dims, DataType::f32, blocked_ ? Tag::any : Tag::nhwc);
  }

  bool blocked_, winograd_, reorderAround_;
  std::vector<Step> steps_;
};

// Builds ResNet-50's convolutional trunk; returns the final activation.
memory buildResNet50(Network& net) {
  memory x = net.conv("stem 7x7", net.input(3, 224), 64, 7, 2, true);
  x = net.maxPool(x);
  const memory::dim widths[] = {64, 128, 256, 512}, blocks[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    for (int block = 0; block < blocks[stage]; ++block) {
      const memory::dim stride = (stage > 0 && block == 0) ? 2 : 1;
      const memory::dim width = widths[stage];
      memory shortcut = block == 0 ? net.conv("projection 1x1", x, 4 * width, 1, stride, false) : net.copy(x);
      memory t = net.conv("reduce 1x1", x, width, 1, 1, true);
      t = net.conv(stride == 2 ? "3x3 stride 2" : "3x3 " + std::to_string(width) + " channels", t, width, 3, stride,
                   true);
      x = net.conv("expand 1x1 + sum", t, 4 * width, 1, 1, true, &shortcut);
    }
  }
  return x;
}
} // namespace

int main(int argc, char** argv) {
  using cleave::bench::median;
  int rounds = 5, repeat = 20;
  if (!cleave::bench::parseRoundsAndRepeat(argc, argv, rounds, repeat)) {
    std::fprintf(stderr, "usage: bench_conv_layout [--rounds R] [--repeat N]\n");
    return 2;
  }
  const char* names[] = {"nhwc", "blocked", "winograd", "wino-nhwc"};
  Network nhwc(false, false), blocked(true, false), winograd(true, true), winogradInNhwc(false, true, true);
  Network* sides[] = {&nhwc, &blocked, &winograd, &winogradInNhwc};
  constexpr int kSides = 4;
  std::printf("ResNet-50 trunk, batch 1, 224x224 (sides: see the header)\n");
  bool built[kSides] = {};
  for (int side = 0; side < kSides; ++side) {
    try { // oneDNN 2.6's Winograd needs AVX-512: on an AVX2 CPU those sides have no kernel
      buildResNet50(*sides[side]);
      built[side] = true;
    } catch (const dnnl::error& error) {
      std::printf("  %-9s not on this CPU (oneDNN: %s)\n", names[side], error.what());
    }
  }
  if (!built[0])
    return 1;
  std::vector<double> medians[kSides];
  std::unordered_map<std::string, double> kinds[kSides];
  for (int round = 0; round < rounds; ++round) {
    for (int k = 0; k < kSides; ++k) {
      const int side = round % 2 == 0 ? k : kSides - 1 - k;
      if (!built[side])
        continue;
      sides[side]->run(); // warm-up
      medians[side].push_back(cleave::bench::timeRepeated(repeat, [&] { sides[side]->run(); }).second);
      sides[side]->run(&kinds[side]);
    }
  }
  for (int side = 0; side < kSides; ++side) {
    if (!built[side])
      continue;
    std::vector<double> ratios;
    for (int r = 0; r < rounds; ++r)
      ratios.push_back(medians[side][r] / medians[0][r]);
    std::sort(ratios.begin(), ratios.end());
    std::printf("  %-9s %8.3f ms  %.3fx nhwc [%.3f, %.3f]\n", names[side], median(medians[side]) * 1e3,
                median(medians[side]) / median(medians[0]), ratios.front(), ratios.back());
  }
  std::printf("  per layer kind, ms per network over %d timed passes (one wait per primitive):\n", rounds);
  std::vector<std::string> layerKinds;
  for (const auto& entry : kinds[0])
    layerKinds.push_back(entry.first);
  std::sort(layerKinds.begin(), layerKinds.end());
  for (const std::string& kind : layerKinds) {
    std::printf("    %-18s", kind.c_str());
    for (int side = 0; side < kSides; ++side)
      if (built[side])
        std::printf(" %s %7.3f", names[side], kinds[side][kind] * 1e3 / rounds);
    std::printf("\n");
  }
  return 0;
}
