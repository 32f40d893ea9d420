#include "cli/runtime_options.h"

#include <string>

#include "cli/options.h"
#include "runtime/cpu/cpu_switches.h"
#include "runtime/cuda/cuda_switches.h"

namespace cleave::cli {
namespace {
// A wing's switch as a flag: --no-NAME turns off one that is on by default, --NAME turns on one
// that is off.
void addWingSwitch(CLI::App& app, runtime::WingSwitches& switches, const runtime::WingSwitch& wingSwitch) {
  const std::string flag = (wingSwitch.byDefault ? "--no-" : "--") + std::string(wingSwitch.name);
  app.add_flag_callback(flag, [&switches, &wingSwitch] { switches.set(wingSwitch, !wingSwitch.byDefault); },
                        std::string(wingSwitch.help));
}
} // namespace

void addRuntimeOptions(CLI::App& app, RuntimeOptions& options) {
  app.add_option("--backend", options.backend, "aten-cpu, aten-cpu-bf16, aten-cpu-as-gpu (host and device memory apart: copies counted as on a GPU), aten-cuda or profile:FILE (accelerator submodules)")
      ->capture_default_str();
  app.add_option("--inputs", options.inputsPath, "input tensors: .json, .pb (ONNX TensorProto; Sequence/OptionalProto for inputs so declared), .npy, .npz, or a folder of input_N.pb / NAME.npy");
  app.add_option("--seed", options.seed, "seed of the random inputs used without --inputs")->capture_default_str();
  app.add_flag("--random", options.random, "use random inputs (the default without --inputs)");
  app.add_option("--dim", options.dims, "NAME=SIZE for a symbolic input dim (repeatable; others are 1)");
  app.add_flag("!--no-fusion", options.optimizations.fusion, "run every node alone (no fused MatMul+Add[+GELU], GELU, LayerNorm, Conv+Relu/Clip/HardSwish/HardSigmoid/SiLU/Add, Conv/ConvTranspose+BatchNormalization[+Relu] folded, [Concat+]BatchNormalization+Relu, [Concat+]channel shuffle)");
  app.add_flag("!--no-fused-attention", options.optimizations.fusedAttention,
               "run attention (MatMul, scale, masks, Softmax, MatMul) node by node, not as one fused attention call");
  app.add_flag("!--no-blocked-layout", options.optimizations.blockedLayout,
               "make every convolution output dense (channels-last) after its op: no value stays in oneDNN's "
               "blocked layout from one convolution to the next (by default it does where every reader is a "
               "convolution that runs blocked, as on AVX2)");
  app.add_flag("!--no-shape-memo", options.optimizations.rememberShapeArithmetic,
               "compute shape arithmetic again every run (by default a small pure op, such as a Gather of a Shape, "
               "reuses its last results while its operands are the same)");
  for (const runtime::WingSwitch& wingSwitch : runtime::cpu::kSwitches)
    addWingSwitch(app, options.optimizations.wing, wingSwitch);
  for (const runtime::WingSwitch& wingSwitch : runtime::cuda::kSwitches)
    addWingSwitch(app, options.optimizations.wing, wingSwitch);
  addEnumOption(app, "--precision", options.optimizations.precision, runtime::kPrecisions,
                "fp16 and bf16 are torch.autocast(dtype=...)'s mixed precision on the backend's device: matrix "
                "products, convolutions and attention in the half type, the device's precision-sensitive ops "
                "(softmax, norms, reductions on CUDA) in float32, parameters kept in float32, outputs returned "
                "in their declared types (aten-cpu-bf16 instead computes everything in bfloat16)");
  app.add_flag("!--no-join", options.optimizations.joinSeams,
               "a cut model: run each submodule as its own module (timed one by one, no fusion across seams); by "
               "default neighbouring submodules on the same backend run as one graph");
}

Expected<std::map<std::string, std::int64_t>> parseDims(const std::vector<std::string>& dims) {
  std::map<std::string, std::int64_t> parsed;
  for (const std::string& entry : dims) {
    std::size_t eq = entry.find('=');
    char* end = nullptr;
    long long value = eq == std::string::npos ? -1 : std::strtoll(entry.c_str() + eq + 1, &end, 10);
    if (eq == std::string::npos || eq == 0 || value < 0 || (end && *end != '\0'))
      return Error(ErrorCode::InvalidArgument) << "--dim '" << entry << "': expected NAME=SIZE";
    parsed[entry.substr(0, eq)] = value;
  }
  return parsed;
}

void addScheduleOption(CLI::App& app, std::optional<pipeline::ScheduleKind>& kind, const std::string& help) {
  app.add_option_function<std::string>(
         "--schedule", [&kind](const std::string& text) { kind = pipeline::kScheduleKinds.parse(text); },
         help + " (" + pipeline::kScheduleKinds.choices() + ")")
      ->check(CLI::IsMember(pipeline::kScheduleKinds.names()));
}

} // namespace cleave::cli
