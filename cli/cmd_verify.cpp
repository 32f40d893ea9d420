// cli/cmd_verify.cpp - `cleave verify MODEL OUT_DIR [--rtol R --atol A] [--elementwise]`: the
// original and its cut on the same inputs; per output the largest error against the output's scale
// and element by element (runtime/model/compare.h); exit 1 past tolerance.
#include <sstream>

#include "base/json.h"
#include "cli/commands.h"
#include "cli/runtime_library.h"
#include "cli/options.h"
#include "cli/runtime_inputs.h"
#include "plan/plan_file.h"
#include "runtime/cuda/cuda_switches.h"
#include "runtime/model/compare.h"
#include "runtime/model/host_backend.h"

namespace cleave::cli {

namespace {
struct VerifyFlags {
  std::string modelPath, cutPath;
  RuntimeOptions runtime;
  runtime::AllClose tolerance = runtime::kCutTolerance;
  bool rtolGiven = false, elementwise = false, json = false;
};

void describe(CLI::App& app, VerifyFlags& flags) {
  app.description("Run a model and its cut (a split/partition output directory) on the same inputs and compare "
                  "every output: |cut - original| <= atol + rtol * (the output's largest |original|), since "
                  "float32 reassociation errs with the magnitudes that flow through the model, not with each "
                  "element; --elementwise holds every element to its own |original| (numpy's allclose).");
  app.add_option("MODEL", flags.modelPath, "the original ONNX model")->required();
  app.add_option("OUT_DIR", flags.cutPath, "its cut: a directory with plan.json")->required();
  addRuntimeOptions(app, flags.runtime);
  app.add_option("--rtol", flags.tolerance.rtol,
                 "relative tolerance (default 1e-4; 1e-2 for aten-cuda with --tf32; 1e-2 with --precision fp16, 5e-2 with "
                 "bf16: runtime/model/tolerance.h)")
      ->each([&flags](const std::string&) { flags.rtolGiven = true; })
      ->check(kFinite)
      ->check(CLI::NonNegativeNumber);
  app.add_option("--atol", flags.tolerance.atol, "absolute tolerance")
      ->capture_default_str()
      ->check(kFinite)
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--elementwise", flags.elementwise, "scale rtol by each element's |original|, not the output's largest");
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
    // The one comparison rule (runtime/model/compare.h), against the original.
    runtime::AllClose rule = flags.tolerance;
    if (flags.elementwise)
      rule.scale = runtime::ToleranceScale::Element;
    at::Tensor cut = found->second;
    if (cut.defined() && expected.defined() && !cut.is_nested() && at::isFloatingType(cut.scalar_type()) &&
        at::isFloatingType(expected.scalar_type()))
      cut = cut.to(expected.scalar_type()); // a low-precision backend's output, compared in the original's dtype
    runtime::Comparison comparison = runtime::compareTensors(cut, expected, rule);
    bool within = comparison.equal;
    summary["outputs"][name] = {{"max_abs", comparison.maxAbs},
                                {"scale", comparison.outputScale},
                                {"max_scaled", comparison.scaledError()},
                                {"max_rel", comparison.maxElementRel},
                                {"past_elementwise", comparison.pastElementwise},
                                {"within_tolerance", within}};
    text << name << ": max abs " << comparison.maxAbs << " (" << comparison.scaledError() << " of its largest |value| "
         << comparison.outputScale << "), max rel " << comparison.maxElementRel << " element-wise ("
         << comparison.pastElementwise << " past " << flags.tolerance.atol << " + " << flags.tolerance.rtol
         << " * |value|)" << (within ? "" : "  (past tolerance)") << "\n";
    if (!within && failure.empty())
      failure = "output '" + name + "' differs past tolerance: " + comparison.message;
  }
  return failure;
}

Status verify(VerifyFlags flags, std::ostream& out, std::ostream&) {
  if (!plan::isPlanDirectory(flags.cutPath))
    return Error(ErrorCode::NotFound) << flags.cutPath << ": no plan.json (not a cut model)";
  if (!flags.rtolGiven)
    flags.tolerance.rtol = runtime::cutToleranceFor(flags.runtime.optimizations.wing.isOn(runtime::cuda::kTf32),
                                                    flags.runtime.optimizations.precision)
                               .rtol;
  RuntimeOptions reference = flags.runtime; // the original in float32 on the CPU
  reference.backend = runtime::kHostBackend;
  reference.optimizations.wing.set(runtime::cuda::kTf32, false);
  reference.optimizations.precision = runtime::Precision::Fp32;
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
  summary["rtol"] = flags.tolerance.rtol;
  summary["atol"] = flags.tolerance.atol;
  summary["scale"] = flags.elementwise ? "element" : "output";
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

const CommandBody kVerifyBody{"verify", parseThenRun<VerifyFlags, describe, verify>};

} // namespace cleave::cli
