// runtime/kernels/recurrent.cpp - ONNX RNN, GRU and LSTM (opsets 7-14+), every attribute variant.
//
// One loop serves the three cells: the input projection X W^T + Wb of all time steps is one
// matrix product per direction; each step then adds H R^T + Rb and applies the cell (gates in
// ONNX's order: GRU z, r, h; LSTM i, o, f, c; peepholes i, o, f). Directions forward, reverse and
// bidirectional; `sequence_lens` (a batch entry stops at its length: its later Y rows are zero and
// Y_h / Y_c hold the state at its last step; the reverse direction starts at the entry's last
// step); initial states; layout 0 ([seq, batch, ...]) and 1 ([batch, seq, ...]); clip (applied
// to every gate's input of an activation); GRU's linear_before_reset; LSTM's input_forget
// (f = 1 - i); custom activations with their alpha/beta, consumed in order by the activations
// that take them, as ONNX Runtime does.
// Cost: O(seq x batch x hidden x (input + hidden) x gates) per direction, seq small products.
#include <cmath>

#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

enum class Cell : std::uint8_t { Rnn, Gru, Lstm };

struct Activation {
  std::string name;
  float alpha = 0.0f, beta = 0.0f;

  at::Tensor operator()(const at::Tensor& x) const {
    if (name == "Sigmoid") return at::sigmoid(x);
    if (name == "Tanh") return at::tanh(x);
    if (name == "Relu") return at::relu(x);
    if (name == "LeakyRelu") return at::leaky_relu(x, alpha);
    if (name == "ThresholdedRelu") return at::where(x > alpha, x, at::zeros_like(x));
    if (name == "Affine") return x * alpha + beta;
    if (name == "ScaledTanh") return at::tanh(x * beta) * alpha;
    if (name == "HardSigmoid") return at::clamp(x * alpha + beta, 0.0, 1.0);
    if (name == "Elu") return at::elu(x, alpha);
    if (name == "Softsign") return x / (x.abs() + 1);
    if (name == "Softplus") return at::softplus(x);
    throw KernelError("unknown activation '" + name + "'");
  }
};

// The activations' default alpha and beta, and how many of the lists' values each one takes.
Activation makeActivation(const std::string& name, const std::vector<float>& alphas, std::size_t& nextAlpha,
                          const std::vector<float>& betas, std::size_t& nextBeta) {
  struct Defaults { const char* name; bool takesAlpha, takesBeta; float alpha, beta; };
  static const Defaults kDefaults[] = {
      {"LeakyRelu", true, false, 0.01f, 0.0f}, {"ThresholdedRelu", true, false, 1.0f, 0.0f},
      {"Affine", true, true, 1.0f, 0.0f},      {"ScaledTanh", true, true, 1.0f, 1.0f},
      {"HardSigmoid", true, true, 0.2f, 0.5f}, {"Elu", true, false, 1.0f, 0.0f}};
  Activation activation{name};
  for (const Defaults& d : kDefaults) {
    if (name != d.name)
      continue;
    activation.alpha = d.takesAlpha && nextAlpha < alphas.size() ? alphas[nextAlpha++] : d.alpha;
    activation.beta = d.takesBeta && nextBeta < betas.size() ? betas[nextBeta++] : d.beta;
  }
  return activation;
}

struct RecurrentSettings {
  Cell cell;
  std::int64_t hidden = 0, directions = 1, layout = 0;
  bool reverseOnly = false, linearBeforeReset = false, inputForget = false;
  std::optional<double> clip;
  std::vector<std::vector<Activation>> activations; // per direction: f (RNN); f, g (GRU); f, g, h (LSTM)
};

int gatesOf(Cell cell) { return cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 3 : 4; }

RecurrentSettings readSettings(const KernelContext& c, Cell cell) {
  RecurrentSettings s;
  s.cell = cell;
  s.hidden = c.intAttr("hidden_size", 0);
  if (s.hidden <= 0)
    s.hidden = c.input(2).size(-1); // R is [directions, gates * hidden, hidden]
  std::string direction = c.stringAttr("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    throw KernelError("unknown direction '" + direction + "'");
  s.directions = direction == "bidirectional" ? 2 : 1;
  s.reverseOnly = direction == "reverse";
  s.layout = c.intAttr("layout", 0);
  s.linearBeforeReset = c.intAttr("linear_before_reset", 0) != 0;
  s.inputForget = c.intAttr("input_forget", 0) != 0;
  if (c.attribute("clip"))
    s.clip = c.floatAttr("clip", 0.0f);
  std::vector<std::string> names;
  if (const ir::Attribute* attr = c.attribute("activations"))
    names = attr->strings;
  static const std::vector<std::string> kDefaults[] = {{"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
  const std::vector<std::string>& defaults = kDefaults[static_cast<int>(cell)];
  if (names.empty())
    for (std::int64_t d = 0; d < s.directions; ++d)
      names.insert(names.end(), defaults.begin(), defaults.end());
  if (names.size() != defaults.size() * static_cast<std::size_t>(s.directions))
    throw KernelError("activations: expected " + std::to_string(defaults.size() * s.directions) + " names, got " +
                      std::to_string(names.size()));
  std::vector<float> alphas = c.floatsAttr("activation_alpha"), betas = c.floatsAttr("activation_beta");
  std::size_t nextAlpha = 0, nextBeta = 0;
  for (std::int64_t d = 0; d < s.directions; ++d) {
    s.activations.emplace_back();
    for (std::size_t k = 0; k < defaults.size(); ++k)
      s.activations.back().push_back(makeActivation(names[d * defaults.size() + k], alphas, nextAlpha, betas, nextBeta));
  }
  return s;
}

// One direction's weights and starting state.
struct DirectionInputs {
  at::Tensor w, r, wb, rb, peephole; // w [G*H, I], r [G*H, H], biases [G*H], peephole [3H] or undefined
  at::Tensor h0, c0;                 // [batch, H]
};

// Gathers x [seq, batch, ...] along time by `index` [seq, batch] (its own inverse).
at::Tensor gatherTime(const at::Tensor& x, const at::Tensor& index) {
  at::Tensor expanded = index;
  while (expanded.dim() < x.dim())
    expanded = expanded.unsqueeze(-1);
  return at::gather(x, 0, expanded.expand(x.sizes()));
}

class RecurrentStep {
public:
  RecurrentStep(const RecurrentSettings& s, const std::vector<Activation>& act, const DirectionInputs& in)
      : s_(s), act_(act), in_(in) {}

  // One step: gate inputs from the projected input `xw` [batch, G*H]; updates h (and c).
  void operator()(const at::Tensor& xw, at::Tensor& h, at::Tensor& c) const {
    switch (s_.cell) {
    case Cell::Rnn: h = act_[0](clipped(xw + at::matmul(h, in_.r.t()) + in_.rb)); return;
    case Cell::Gru: gru(xw, h); return;
    case Cell::Lstm: lstm(xw, h, c); return;
    }
  }

private:
  at::Tensor clipped(const at::Tensor& x) const { return s_.clip ? at::clamp(x, -*s_.clip, *s_.clip) : x; }

  void gru(const at::Tensor& xw, at::Tensor& h) const {
    std::int64_t H = s_.hidden;
    std::vector<at::Tensor> x = xw.split(H, -1), rb = in_.rb.split(H, -1), r = in_.r.split(H, 0);
    at::Tensor hzr = at::matmul(h, at::cat({r[0], r[1]}, 0).t());
    std::vector<at::Tensor> hr = hzr.split(H, -1);
    at::Tensor z = act_[0](clipped(x[0] + hr[0] + rb[0]));
    at::Tensor reset = act_[0](clipped(x[1] + hr[1] + rb[1]));
    at::Tensor candidate = s_.linearBeforeReset ? x[2] + reset * (at::matmul(h, r[2].t()) + rb[2])
                                                : x[2] + at::matmul(reset * h, r[2].t()) + rb[2];
    at::Tensor n = act_[1](clipped(candidate));
    h = (1 - z) * n + z * h;
  }

  void lstm(const at::Tensor& xw, at::Tensor& h, at::Tensor& c) const {
    std::int64_t H = s_.hidden;
    std::vector<at::Tensor> g = (xw + at::matmul(h, in_.r.t()) + in_.rb).split(H, -1); // i, o, f, c
    std::vector<at::Tensor> p;
    if (in_.peephole.defined())
      p = in_.peephole.split(H, -1); // i, o, f
    auto peep = [&](int k, const at::Tensor& state) { return p.empty() ? g[k] : g[k] + p[k] * state; };
    at::Tensor i = act_[0](clipped(peep(0, c)));
    at::Tensor f = s_.inputForget ? 1 - i : act_[0](clipped(peep(2, c)));
    at::Tensor candidate = act_[1](clipped(g[3]));
    c = f * c + i * candidate;
    at::Tensor o = act_[0](clipped(peep(1, c)));
    h = o * act_[2](c);
  }

  const RecurrentSettings& s_;
  const std::vector<Activation>& act_;
  const DirectionInputs& in_;
};

DirectionInputs directionInputs(const KernelContext& c, const RecurrentSettings& s, std::int64_t d, std::int64_t batch,
                                const at::TensorOptions& options) {
  std::int64_t gh = gatesOf(s.cell) * s.hidden;
  DirectionInputs in;
  in.w = c.input(1)[d];
  in.r = c.input(2)[d];
  at::Tensor bias = c.has(3) ? c.input(3)[d] : at::zeros({2 * gh}, options);
  in.wb = bias.slice(0, 0, gh);
  in.rb = bias.slice(0, gh, 2 * gh);
  auto state = [&](std::size_t i) {
    if (!c.has(i))
      return at::zeros({batch, s.hidden}, options);
    at::Tensor initial = c.input(i);
    return s.layout == 1 ? initial.select(1, d) : initial[d];
  };
  in.h0 = state(5);
  if (s.cell == Cell::Lstm) {
    in.c0 = state(6);
    if (c.has(7))
      in.peephole = c.input(7)[d];
  }
  return in;
}

struct DirectionResult {
  at::Tensor y, h, c; // y [seq, batch, H]
};

DirectionResult runDirection(const RecurrentSettings& s, const std::vector<Activation>& act, const DirectionInputs& in,
                             at::Tensor x, const at::Tensor& lengths, bool reverse) {
  std::int64_t steps = x.size(0);
  at::Tensor order;
  if (reverse) {
    order = reversedTimeIndex(lengths, steps);
    x = gatherTime(x, order);
  }
  at::Tensor xw = at::matmul(x, in.w.t()) + in.wb; // [seq, batch, G*H]
  RecurrentStep step(s, act, in);
  at::Tensor h = in.h0, c = in.c0;
  std::vector<at::Tensor> ys;
  ys.reserve(steps);
  for (std::int64_t t = 0; t < steps; ++t) {
    at::Tensor live = (lengths > t).unsqueeze(1); // [batch, 1]
    at::Tensor nextH = h, nextC = c;
    step(xw[t], nextH, nextC);
    ys.push_back(at::where(live, nextH, at::zeros_like(nextH)));
    h = at::where(live, nextH, h);
    if (c.defined())
      c = at::where(live, nextC, c);
  }
  at::Tensor y = steps > 0 ? at::stack(ys, 0) : at::zeros({0, h.size(0), s.hidden}, h.options());
  if (reverse && steps > 0)
    y = gatherTime(y, order);
  return {y, h, c};
}

Outputs recurrent(KernelContext& c, Cell cell) {
  RecurrentSettings s = readSettings(c, cell);
  at::Tensor x = c.input(0);
  if (x.dim() != 3)
    throw KernelError("X must have rank 3");
  if (s.layout == 1)
    x = x.transpose(0, 1); // [batch, seq, I] -> [seq, batch, I]
  std::int64_t steps = x.size(0), batch = x.size(1);
  at::Tensor lengths = c.has(4) ? c.input(4).to(at::kLong) : at::full({batch}, steps, at::kLong);
  if (lengths.dim() != 1 || lengths.size(0) != batch)
    throw KernelError("sequence_lens must have one entry per batch element");
  if (batch > 0 && (lengths.min().item<std::int64_t>() < 0 || lengths.max().item<std::int64_t>() > steps))
    throw KernelError("sequence_lens must be within [0, " + std::to_string(steps) + "]");
  lengths = lengths.to(x.device()); // checked on the host (a made one, or sequence_lens placed there); masks X's steps
  std::vector<at::Tensor> ys, hs, cs;
  for (std::int64_t d = 0; d < s.directions; ++d) {
    DirectionInputs in = directionInputs(c, s, d, batch, x.options());
    DirectionResult r = runDirection(s, s.activations[d], in, x, lengths, d == 1 || s.reverseOnly);
    ys.push_back(r.y);
    hs.push_back(r.h);
    if (r.c.defined())
      cs.push_back(r.c);
  }
  at::Tensor y = at::stack(ys, 1);  // [seq, dirs, batch, H]
  at::Tensor yh = at::stack(hs, 0); // [dirs, batch, H]
  at::Tensor yc = cs.empty() ? at::Tensor() : at::stack(cs, 0);
  if (s.layout == 1) {
    y = y.permute({2, 0, 1, 3}).contiguous(); // [batch, seq, dirs, H]
    yh = yh.transpose(0, 1).contiguous();
    if (yc.defined())
      yc = yc.transpose(0, 1).contiguous();
  }
  Outputs outputs{y, yh};
  if (cell == Cell::Lstm)
    outputs.push_back(yc);
  return outputs;
}
} // namespace

void registerRecurrentKernels(KernelTable& t) {
  t.add("RNN", [](KernelContext& c) -> Outputs { return recurrent(c, Cell::Rnn); });
  t.add("GRU", [](KernelContext& c) -> Outputs { return recurrent(c, Cell::Gru); });
  t.add("LSTM", [](KernelContext& c) -> Outputs { return recurrent(c, Cell::Lstm); });
}

} // namespace cleave::runtime
