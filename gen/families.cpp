#include "base/strings.h"
#include "gen/families.h"

#include <cmath>
#include <cstring>
#include <unordered_map>

#include "ir/builder.h"

namespace cleave::gen {
namespace {
using ir::DType;
using ir::ValueType;

// Emits ONNX ops into a builder with FX-style names ("relu", "relu_1", ...), typed outputs and
// seeded random weights.
class OnnxEmitter {
public:
  OnnxEmitter(std::string graphName, std::uint64_t seed) : rng_(seed * 0x9E3779B97F4A7C15ull + 1) {
    ir::ModelInfo& info = builder_.modelInfo();
    info.format = ir::SourceFormat::Onnx;
    info.graphName = std::move(graphName);
    info.irVersion = 8;
    info.opsetImports = {{"", 17}};
    info.producerName = "cleave gen";
  }

  ir::GraphBuilder& builder() { return builder_; }

  std::string input(const std::string& name, const ValueType& type) {
    builder_.addInput(name, type);
    return name;
  }

  // A float32 weight, uniform in [-bound, bound].
  std::string weight(const std::string& name, std::vector<std::int64_t> dims, float bound) {
    std::int64_t count = 1;
    for (std::int64_t d : dims)
      count *= d;
    std::string bytes(static_cast<std::size_t>(count) * 4, '\0');
    for (std::int64_t i = 0; i < count; ++i) {
      float value = (nextUniform() * 2.0f - 1.0f) * bound;
      std::memcpy(bytes.data() + i * 4, &value, 4);
    }
    return constant(name, DType::F32, std::move(dims), bytes);
  }

  std::string constant(const std::string& name, DType dtype, std::vector<std::int64_t> dims,
                       std::string_view bytes) {
    ir::Parameter param;
    param.name = name;
    param.dtype = dtype;
    param.dims = dims;
    param.bytes = static_cast<std::int64_t>(bytes.size());
    param.data = builder_.appendInlineData(bytes);
    builder_.addParameter(std::move(param), ValueType::tensor(dtype, std::move(dims)));
    return name;
  }

  std::string int64s(const std::string& name, const std::vector<std::int64_t>& values) {
    std::string bytes(values.size() * 8, '\0');
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return constant(name, DType::I64, {static_cast<std::int64_t>(values.size())}, bytes);
  }

  std::string scalar(const std::string& name, float value) {
    std::string bytes(4, '\0');
    std::memcpy(bytes.data(), &value, 4);
    return constant(name, DType::F32, {}, bytes);
  }

  // One ONNX op. Its value is named like torch.fx names nodes (base, base_1, base_2, ...). Its
  // node takes the value's name at the top level, and torch's exporter style inside a module
  // ("/layers.0/Gemm", "/layers.0/Gemm_1"), from which readers recover the scope.
  std::string op(const std::string& opType, const std::string& baseName, std::vector<std::string> inputs,
                 const ValueType& type, std::vector<ir::Attribute> attrs = {},
                 const std::string& scope = "") {
    std::string name = uniqueName(baseName);
    ir::NodeSpec spec;
    spec.name = scope.empty() ? name : uniqueName("/" + scope + "/" + opType);
    spec.opType = opType;
    spec.scope = scope;
    spec.inputs = std::move(inputs);
    spec.outputs.push_back({name, type});
    spec.attributes = std::move(attrs);
    builder_.addNode(std::move(spec));
    return name;
  }

private:
  std::string uniqueName(const std::string& base) {
    std::uint32_t& count = counts_[base];
    return count++ == 0 ? base : base + "_" + std::to_string(count - 1);
  }

  float nextUniform() { // xorshift64*: portable and fast
    rng_ ^= rng_ >> 12;
    rng_ ^= rng_ << 25;
    rng_ ^= rng_ >> 27;
    return static_cast<float>((rng_ * 0x2545F4914F6CDD1Dull) >> 40) / static_cast<float>(1 << 24);
  }

  ir::GraphBuilder builder_;
  std::uint64_t rng_;
  std::unordered_map<std::string, std::uint32_t> counts_;
};

ir::Attribute intAttr(const std::string& name, std::int64_t value) {
  ir::Attribute attr;
  attr.name = name;
  attr.kind = ir::AttrKind::Int;
  attr.intValue = value;
  return attr;
}

ir::Attribute intsAttr(const std::string& name, std::vector<std::int64_t> values) {
  ir::Attribute attr;
  attr.name = name;
  attr.kind = ir::AttrKind::Ints;
  attr.ints = std::move(values);
  return attr;
}

ir::Attribute floatAttr(const std::string& name, double value) {
  ir::Attribute attr;
  attr.name = name;
  attr.kind = ir::AttrKind::Float;
  attr.floatValue = static_cast<float>(value); // ONNX float attributes are 32-bit
  return attr;
}

// graphs.py chain: matmul -> relu -> (tanh | sigmoid every 5th) -> add(relu, act).
Expected<ir::Graph> chain(std::int64_t blocks, const FamilyOptions& o) {
  std::int64_t width = o.width ? o.width : 16, batch = o.batch ? o.batch : 4;
  OnnxEmitter e("chain", o.seed);
  e.builder().reserve(static_cast<std::size_t>(blocks) * 5 + 2, static_cast<std::size_t>(blocks) * 5 + 2);
  ValueType act = ValueType::tensor(DType::F32, {batch, width});
  std::string x = e.input("x", act);
  for (std::int64_t i = 0; i < blocks; ++i) {
    std::string w = e.weight("w" + std::to_string(i), {width, width}, 1.0f);
    std::string h = e.op("MatMul", "matmul", {x, w}, act);
    std::string r = e.op("Relu", "relu", {h}, act);
    std::string s = i % 5 == 4 ? e.op("Sigmoid", "sigmoid", {r}, act) : e.op("Tanh", "tanh", {r}, act);
    x = e.op("Add", "add", {r, s}, act);
  }
  e.builder().setOutputs({x});
  return std::move(e.builder()).finish();
}

// graphs.py wide: `branches` towers of `depth` relu/sigmoid nodes, joined by cat on dim 0.
Expected<ir::Graph> wide(std::int64_t branches, const FamilyOptions& o) {
  std::int64_t depth = 4, width = o.width ? o.width : 4, batch = o.batch ? o.batch : 2;
  OnnxEmitter e("wide", o.seed);
  ValueType act = ValueType::tensor(DType::F32, {batch, width});
  std::string x = e.input("x", act);
  std::vector<std::string> outs;
  for (std::int64_t b = 0; b < branches; ++b) {
    std::string h = x;
    for (std::int64_t d = 0; d < depth; ++d)
      h = (b + d) % 7 == 3 ? e.op("Sigmoid", "sigmoid", {h}, act) : e.op("Relu", "relu", {h}, act);
    outs.push_back(h);
  }
  std::string cat = e.op("Concat", "cat", outs, ValueType::tensor(DType::F32, {batch * branches, width}),
                         {intAttr("axis", 0)});
  e.builder().setOutputs({cat});
  return std::move(e.builder()).finish();
}

// torch.nn.Linear as ONNX exports it: Gemm(x, W, b, transB=1).
std::string linear(OnnxEmitter& e, const std::string& module, const std::string& x,
                   std::int64_t in, std::int64_t out, const ValueType& type) {
  float bound = 1.0f / std::sqrt(static_cast<float>(in));
  std::string w = e.weight(module + ".weight", {out, in}, bound);
  std::string b = e.weight(module + ".bias", {out}, bound);
  std::string fxName = module;
  for (char& c : fxName)
    if (c == '.')
      c = '_';
  return e.op("Gemm", fxName, {x, w, b}, type, {intAttr("transB", 1)}, module);
}

// graphs.py linear_chain: Linear, then alternately `+ 1` and relu.
Expected<ir::Graph> linearChain(std::int64_t n, const FamilyOptions& o) {
  std::int64_t width = o.width ? o.width : 32, batch = o.batch ? o.batch : 4;
  OnnxEmitter e("linear_chain", o.seed);
  ValueType act = ValueType::tensor(DType::F32, {batch, width});
  std::string x = e.input("x", act);
  std::string one = e.scalar("one", 1.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    x = linear(e, "layers." + std::to_string(i), x, width, width, act);
    x = i % 2 ? e.op("Relu", "relu", {x}, act) : e.op("Add", "add", {x, one}, act);
  }
  e.builder().setOutputs({x});
  return std::move(e.builder()).finish();
}

// graphs.py diamonds: y = Linear(x); x = relu(y) + sigmoid(y).
Expected<ir::Graph> diamonds(std::int64_t k, const FamilyOptions& o) {
  std::int64_t width = o.width ? o.width : 8, batch = o.batch ? o.batch : 2;
  OnnxEmitter e("diamonds", o.seed);
  ValueType act = ValueType::tensor(DType::F32, {batch, width});
  std::string x = e.input("x", act);
  for (std::int64_t i = 0; i < k; ++i) {
    std::string y = linear(e, "lins." + std::to_string(i), x, width, width, act);
    std::string r = e.op("Relu", "relu", {y}, act);
    std::string s = e.op("Sigmoid", "sigmoid", {y}, act);
    x = e.op("Add", "add", {r, s}, act);
  }
  e.builder().setOutputs({x});
  return std::move(e.builder()).finish();
}

// Pre-norm transformer encoder blocks: x += Attn(LN(x)); x += MLP(LN(x)).
Expected<ir::Graph> transformer(std::int64_t layers, const FamilyOptions& o) {
  std::int64_t d = o.width ? o.width : 64, h = o.heads, s = o.sequence, b = o.batch ? o.batch : 1;
  if (h < 1 || d % h != 0 || s < 1)
    return Error(ErrorCode::InvalidArgument) << "transformer width " << d
                                             << " must be a multiple of heads " << h;
  std::int64_t dh = d / h, ffn = 4 * d;
  OnnxEmitter e("transformer", o.seed);
  auto t = [](std::vector<std::int64_t> dims) { return ValueType::tensor(DType::F32, std::move(dims)); };
  std::string x = e.input("x", t({b, s, d}));
  std::string headsShape = e.int64s("heads_shape", {b, s, h, dh});
  std::string modelShape = e.int64s("model_shape", {b, s, d});
  std::string scale = e.scalar("attn_scale", 1.0f / std::sqrt(static_cast<float>(dh)));
  float bound = 1.0f / std::sqrt(static_cast<float>(d));
  for (std::int64_t l = 0; l < layers; ++l) {
    std::string m = "layers." + std::to_string(l);
    auto layerNorm = [&](const std::string& name, const std::string& input) {
      std::string gamma = e.weight(m + "." + name + ".weight", {d}, 1.0f);
      std::string beta = e.weight(m + "." + name + ".bias", {d}, 0.1f);
      return e.op("LayerNormalization", "layer_norm", {input, gamma, beta}, t({b, s, d}),
                  {intAttr("axis", -1), floatAttr("epsilon", 1e-5)}, m + "." + name);
    };
    auto dense = [&](const std::string& name, const std::string& input, std::int64_t in, std::int64_t out) {
      std::string w = e.weight(m + "." + name + ".weight", {in, out}, 1.0f / std::sqrt(static_cast<float>(in)));
      std::string bias = e.weight(m + "." + name + ".bias", {out}, bound);
      std::string mm = e.op("MatMul", "matmul", {input, w}, t({b, s, out}), {}, m + "." + name);
      return e.op("Add", "add", {mm, bias}, t({b, s, out}), {}, m + "." + name);
    };
    std::string a = layerNorm("norm1", x);
    std::string q = dense("q_proj", a, d, d), k = dense("k_proj", a, d, d), v = dense("v_proj", a, d, d);
    auto heads = [&](const std::string& value, std::vector<std::int64_t> perm, std::vector<std::int64_t> dims) {
      std::string r = e.op("Reshape", "reshape", {value, headsShape}, t({b, s, h, dh}), {}, m + ".attn");
      return e.op("Transpose", "transpose", {r}, t(std::move(dims)), {intsAttr("perm", std::move(perm))}, m + ".attn");
    };
    std::string qh = heads(q, {0, 2, 1, 3}, {b, h, s, dh});
    std::string kh = heads(k, {0, 2, 3, 1}, {b, h, dh, s});
    std::string vh = heads(v, {0, 2, 1, 3}, {b, h, s, dh});
    std::string scores = e.op("MatMul", "matmul", {qh, kh}, t({b, h, s, s}), {}, m + ".attn");
    std::string scaled = e.op("Mul", "mul", {scores, scale}, t({b, h, s, s}), {}, m + ".attn");
    std::string probs = e.op("Softmax", "softmax", {scaled}, t({b, h, s, s}), {intAttr("axis", -1)}, m + ".attn");
    std::string context = e.op("MatMul", "matmul", {probs, vh}, t({b, h, s, dh}), {}, m + ".attn");
    std::string merged = e.op("Transpose", "transpose", {context}, t({b, s, h, dh}),
                              {intsAttr("perm", {0, 2, 1, 3})}, m + ".attn");
    std::string flat = e.op("Reshape", "reshape", {merged, modelShape}, t({b, s, d}), {}, m + ".attn");
    std::string attnOut = dense("out_proj", flat, d, d);
    x = e.op("Add", "add", {x, attnOut}, t({b, s, d}), {}, m);
    std::string f = layerNorm("norm2", x);
    std::string up = dense("fc1", f, d, ffn);
    std::string act = e.op("Relu", "relu", {up}, t({b, s, ffn}), {}, m + ".fc1");
    std::string down = dense("fc2", act, ffn, d);
    x = e.op("Add", "add", {x, down}, t({b, s, d}), {}, m);
  }
  e.builder().setOutputs({x});
  return std::move(e.builder()).finish();
}

} // namespace

const std::vector<FamilyInfo>& listFamilies() {
  static const std::vector<FamilyInfo> kFamilies = {
      {"chain", "N blocks of matmul -> relu -> tanh|sigmoid -> add (5 nodes a block, width 16)"},
      {"wide", "N parallel towers of 4 relu/sigmoid nodes joined by concat"},
      {"linear_chain", "N Linear layers (Gemm), each followed alternately by +1 and relu"},
      {"diamonds", "N residual diamonds: Linear, then relu(y) + sigmoid(y)"},
      {"transformer", "N pre-norm encoder layers: attention (4 heads) + MLP, width 64, sequence 16"},
  };
  return kFamilies;
}

Expected<ir::Graph> generateFamily(std::string_view family, std::int64_t n, const FamilyOptions& options) {
  if (n < 1 || n > kMaxFamilyN)
    return Error(ErrorCode::InvalidArgument) << "N must be in [1, " << kMaxFamilyN << "], got " << n;
  for (std::int64_t size : {options.width, options.batch, options.heads, options.sequence})
    if (size < 0 || size > kMaxFamilySize)
      return Error(ErrorCode::InvalidArgument) << "width, batch, heads and sequence must be in [0, "
                                               << kMaxFamilySize << "], got " << size;
  if (family == "chain") return chain(n, options);
  if (family == "wide") return wide(n, options);
  if (family == "linear_chain") return linearChain(n, options);
  if (family == "diamonds") return diamonds(n, options);
  if (family == "transformer") return transformer(n, options);
  std::vector<std::string> known;
  for (const FamilyInfo& info : listFamilies())
    known.emplace_back(info.name);
  return Error(ErrorCode::InvalidArgument) << "unknown family '" << family << "' (known: " << joinStrings(known) << ")";
}

} // namespace cleave::gen
