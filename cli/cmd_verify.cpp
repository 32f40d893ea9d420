// cli/cmd_verify.cpp - `cleave verify MODEL OUT_DIR [--rtol R --atol A]`: the original and its cut
// on the same inputs; per output the max absolute and relative error; exit 1 past tolerance.
#include <sstream>

#include "base/json.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/runtime_options.h"
#include "plan/plan_file.h"
#include "runtime/compare.h"

namespace cleave::cli {

namespace {
struct VerifyFlags {
  std::string modelPath, cutPath;
  RuntimeOptions runtime;
  double rtol = 1e-4, atol = 1e-5;
  bool json = false;
};

void describe(CLI::App& app, VerifyFlags& flags) {
  app.description("Run a model and its cut (a split/partition output directory) on the same inputs and compare "
                  "every output: |cut - original| <= atol + rtol * |original| element-wise.");
  app.add_option("MODEL", flags.modelPath, "the original ONNX model")->required();
  app.add_option("OUT_DIR", flags.cutPath, "its cut: a directory with plan.json")->required();
  addRuntimeOptions(app, flags.runtime);
  app.add_option("--rtol", flags.rtol, "relative tolerance")
      ->capture_default_str()
      ->check(kFinite)
      ->check(CLI::NonNegativeNumber);
  app.add_option("--atol", flags.atol, "absolute tolerance")
      ->capture_default_str()
      ->check(kFinite)
      ->check(CLI::NonNegativeNumber);
  addJsonFlag(app, flags.json);
}

// Compares every output of `want` with `got` into `summary` and `text`; the first failure, if any.
std::string compareOutputs(const runtime::TensorMap& want, const runtime::TensorMap& got, const VerifyFlags& flags,
                           Json& summary, std::ostringstream& text) {
  std::string failure;
  for (const auto& [name, expected] : want) {
    auto found = got.find(name);
    if (found == got.end()) {
      failure = "output '" + name + "' is missing from the cut";
      continue;
    }
    at::Tensor a = expected.to(at::kCPU).to(at::kDouble), b = found->second.to(at::kCPU).to(at::kDouble);
    if (a.sizes() != b.sizes()) {
      failure = "output '" + name + "' has a different shape in the cut";
      continue;
    }
    double maxAbs = 0, maxRel = 0;
    if (a.numel() > 0) {
      at::Tensor diff = (a - b).abs();
      maxAbs = diff.max().item<double>();
      maxRel = (diff / a.abs().clamp_min(1e-12)).max().item<double>();
    }
    // The one comparison rule (runtime/compare.h): numpy's allclose against the original.
    runtime::Comparison comparison = runtime::compareTensors(b, a, {.rtol = flags.rtol, .atol = flags.atol});
    bool within = comparison.equal;
    summary["outputs"][name] = {{"max_abs", maxAbs}, {"max_rel", maxRel}, {"within_tolerance", within}};
    text << name << ": max abs " << maxAbs << ", max rel " << maxRel << (within ? "" : "  (past tolerance)") << "\n";
    if (!within && failure.empty())
      failure = "output '" + name + "' differs past tolerance: " + comparison.message;
  }
  return failure;
}

Status verify(const VerifyFlags& flags, std::ostream& out, std::ostream&) {
  if (!plan::isPlanDirectory(flags.cutPath))
    return Error(ErrorCode::NotFound) << flags.cutPath << ": no plan.json (not a cut model)";
  RuntimeOptions reference = flags.runtime;
  reference.backend = "aten-cpu";
  // Every seam kept: each submodule runs from its own file's declared inputs, as on its device.
  RuntimeOptions cutOptions = flags.runtime;
  cutOptions.optimizations.joinSeams = false;
  CLEAVE_TRY(OpenedRunnable original, openRunnable(flags.modelPath, reference));
  CLEAVE_TRY(OpenedRunnable cut, openRunnable(flags.cutPath, cutOptions));
  CLEAVE_TRY(runtime::TensorMap inputs, makeInputs(original.runnable, flags.runtime));
  Expected<runtime::TensorMap> want = original.runnable.run(inputs);
  if (!want)
    return want.error().withContext("original");
  Expected<runtime::TensorMap> got = cut.runnable.run(inputs);
  if (!got)
    return got.error().withContext("cut");
  Json summary;
  summary["rtol"] = flags.rtol;
  summary["atol"] = flags.atol;
  summary["submodules"] = cut.runnable.submodules();
  std::ostringstream text;
  std::string failure = compareOutputs(*want, *got, flags, summary, text);
  summary["ok"] = failure.empty();
  out << (flags.json ? dumpJson(summary) : text.str());
  if (!failure.empty())
    return Error(ErrorCode::InvalidArgument) << failure;
  return {};
}
} // namespace

const Command kVerifyCommand{"verify", "check that a cut model computes what the original does",
                             parseThenRun<VerifyFlags, describe, verify>};

} // namespace cleave::cli
