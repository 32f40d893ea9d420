// bench/bench_deconvolution.cpp - what a deconvolution's bias and Relu cost on oneDNN 2.6, by
// how they are applied (why onednn::transposedConvolution2d adds them after the primitive).
//
// Per DCGAN generator layer (batch 16, kernel 4, stride 2, pad 1, channels-last float32), five
// sides run on the same input and weight, interleaved per round with the order reversed every
// other round:
//   alone         the deconvolution primitive, no bias, no post-ops
//   with_bias     the bias given to the primitive
//   relu_postop   no bias, Relu as the primitive's eltwise post-op
//   bias_postops  bias and Relu as the primitive's post-ops (binary add per channel, eltwise)
//   epilogue      the primitive alone, then one in-place binary add per channel with Relu as its
//                 post-op (what cleave runs)
// Prints each side's median milliseconds over rounds and its ratio to `alone`.
// usage: bench_deconvolution [--rounds R] [--repeat N]
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
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

struct Layer {
  memory::dim batch, inChannels, outChannels, inSize;
};

// Memory of `desc` filled with `value`.
memory filled(const memory::desc& desc, float value) {
  memory m(desc, engine());
  float* data = static_cast<float*>(m.get_data_handle());
  std::fill(data, data + desc.get_size() / sizeof(float), value);
  return m;
}

// One side: its primitive(s), bound to its own output, ready to run.
struct Side {
  std::string name;
  std::function<void()> run;
  std::vector<double> medians;
};

Side makeSide(const std::string& name, const Layer& layer, bool withBias, bool reluPostOp, bool biasPostOp,
              bool epilogue) {
  const memory::dims src{layer.batch, layer.inChannels, layer.inSize, layer.inSize},
      dst{layer.batch, layer.outChannels, 2 * layer.inSize, 2 * layer.inSize},
      weights{layer.outChannels, layer.inChannels, 4, 4};
  const memory::desc srcDesc(src, DataType::f32, Tag::nhwc), dstDesc(dst, DataType::f32, Tag::nhwc),
      anyWeights(weights, DataType::f32, Tag::any), biasDesc({layer.outChannels}, DataType::f32, Tag::a),
      perChannel({1, layer.outChannels, 1, 1}, DataType::f32, Tag::nchw);
  dnnl::post_ops ops;
  if (biasPostOp)
    ops.append_binary(dnnl::algorithm::binary_add, perChannel);
  if (reluPostOp)
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  using Deconvolution = dnnl::deconvolution_forward;
  const auto kind = dnnl::prop_kind::forward_inference;
  const auto algorithm = dnnl::algorithm::deconvolution_direct;
  Deconvolution::primitive_desc pd(
      withBias ? Deconvolution::desc(kind, algorithm, srcDesc, anyWeights, biasDesc, dstDesc, {2, 2}, {1, 1}, {1, 1})
               : Deconvolution::desc(kind, algorithm, srcDesc, anyWeights, dstDesc, {2, 2}, {1, 1}, {1, 1}),
      attr, engine());
  memory source = filled(srcDesc, 0.1f), weight = filled(pd.weights_desc(), 0.01f), bias = filled(biasDesc, -0.5f),
         channelBias = filled(perChannel, -0.5f), out = filled(dstDesc, 0.0f);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, source}, {DNNL_ARG_WEIGHTS, weight}, {DNNL_ARG_DST, out}};
  if (withBias)
    args.emplace(DNNL_ARG_BIAS, bias);
  if (biasPostOp)
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, channelBias);
  Deconvolution primitive(pd);
  dnnl::primitive after;
  if (epilogue) {
    dnnl::post_ops relu;
    relu.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    dnnl::primitive_attr reluAttr;
    reluAttr.set_post_ops(relu);
    after = dnnl::binary(dnnl::binary::primitive_desc(
        dnnl::binary::desc(dnnl::algorithm::binary_add, dstDesc, perChannel, dstDesc), reluAttr, engine()));
  }
  auto stream = std::make_shared<dnnl::stream>(engine());
  auto run = [=]() mutable {
    primitive.execute(*stream, args);
    if (epilogue)
      after.execute(*stream, {{DNNL_ARG_SRC_0, out}, {DNNL_ARG_SRC_1, channelBias}, {DNNL_ARG_DST, out}});
    stream->wait();
  };
  return Side{name, run, {}};
}
} // namespace

int main(int argc, char** argv) {
  using cleave::bench::median;
  int rounds = 5, repeat = 20;
  if (!cleave::bench::parseRoundsAndRepeat(argc, argv, rounds, repeat)) {
    std::fprintf(stderr, "usage: bench_deconvolution [--rounds R] [--repeat N]\n");
    return 2;
  }
  const Layer layers[] = {{16, 512, 256, 4}, {16, 256, 128, 8}, {16, 128, 64, 16}};
  for (const Layer& layer : layers) {
    std::vector<Side> sides;
    sides.push_back(makeSide("alone", layer, false, false, false, false));
    sides.push_back(makeSide("with_bias", layer, true, false, false, false));
    sides.push_back(makeSide("relu_postop", layer, false, true, false, false));
    sides.push_back(makeSide("bias_postops", layer, false, true, true, false));
    sides.push_back(makeSide("epilogue", layer, false, false, false, true));
    for (int round = 0; round < rounds; ++round) {
      for (std::size_t k = 0; k < sides.size(); ++k) {
        Side& side = sides[round % 2 == 0 ? k : sides.size() - 1 - k];
        side.run(); // warm-up
        side.medians.push_back(cleave::bench::timeRepeated(repeat, side.run).second);
      }
    }
    std::printf("deconvolution %ld -> %ld channels, %ldx%ld -> %ldx%ld, batch %ld:\n", long(layer.inChannels),
                long(layer.outChannels), long(layer.inSize), long(layer.inSize), long(2 * layer.inSize),
                long(2 * layer.inSize), long(layer.batch));
    const double alone = median(sides[0].medians);
    for (const Side& side : sides) {
      std::vector<double> ratios;
      for (std::size_t r = 0; r < side.medians.size(); ++r)
        ratios.push_back(side.medians[r] / sides[0].medians[r]);
      std::sort(ratios.begin(), ratios.end());
      std::printf("  %-13s %8.3f ms  %.2fx alone [%.2f, %.2f]\n", side.name.c_str(), median(side.medians) * 1e3,
                  median(side.medians) / alone, ratios.front(), ratios.back());
    }
  }
  return 0;
}
