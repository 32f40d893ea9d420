// cli/cmd_verify.cpp - `cleave verify MODEL OUT_DIR [--rtol R --atol A]`: the original and its cut
// on the same inputs; per output the max absolute and relative error; exit 1 past tolerance.
#include <sstream>

#include "cli/commands.h"
#include "cli/runtime_options.h"
#include "plan/plan_file.h"
#include "report/json_util.h"
#include "runtime/compare.h"

namespace cleave::cli {

int runVerify(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Run a model and its cut (a split/partition output directory) on the same inputs and compare "
               "every output: |cut - original| <= atol + rtol * |original| element-wise.",
               "cleave verify"};
  std::string modelPath, cutPath;
  RuntimeOptions runtime;
  double rtol = 1e-4, atol = 1e-5;
  bool json = false;
  app.add_option("MODEL", modelPath, "the original ONNX model")->required();
  app.add_option("OUT_DIR", cutPath, "its cut: a directory with plan.json")->required();
  addRuntimeOptions(app, runtime);
  app.add_option("--rtol", rtol, "relative tolerance")->capture_default_str();
  app.add_option("--atol", atol, "absolute tolerance")->capture_default_str();
  app.add_flag("--json", json, "print a JSON report");
  if (int code = parseArguments(app, args, out, err); code >= 0)
    return code;
  if (!plan::isPlanDirectory(cutPath))
    return reportError("cleave verify", Error(ErrorCode::NotFound) << cutPath << ": no plan.json (not a cut model)", err);
  RuntimeOptions reference = runtime;
  reference.backend = "aten-cpu";
  Expected<OpenedRunnable> original = openRunnable(modelPath, reference);
  if (!original)
    return reportError("cleave verify", original.error(), err);
  Expected<OpenedRunnable> cut = openRunnable(cutPath, runtime);
  if (!cut)
    return reportError("cleave verify", cut.error(), err);
  Expected<runtime::TensorMap> inputs = makeInputs(original->runnable, runtime);
  if (!inputs)
    return reportError("cleave verify", inputs.error(), err);
  Expected<runtime::TensorMap> want = original->runnable.run(*inputs);
  if (!want)
    return reportError("cleave verify", want.error().withContext("original"), err);
  Expected<runtime::TensorMap> got = cut->runnable.run(*inputs);
  if (!got)
    return reportError("cleave verify", got.error().withContext("cut"), err);
  report::Json summary;
  summary["rtol"] = rtol;
  summary["atol"] = atol;
  summary["submodules"] = cut->runnable.submodules();
  std::ostringstream text;
  std::string failure;
  for (const auto& [name, expected] : *want) {
    auto found = got->find(name);
    if (found == got->end()) {
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
    runtime::Comparison comparison = runtime::compareTensors(b, a, {.rtol = rtol, .atol = atol});
    bool within = comparison.equal;
    summary["outputs"][name] = {{"max_abs", maxAbs}, {"max_rel", maxRel}, {"within_tolerance", within}};
    text << name << ": max abs " << maxAbs << ", max rel " << maxRel << (within ? "" : "  (past tolerance)") << "\n";
    if (!within && failure.empty())
      failure = "output '" + name + "' differs past tolerance: " + comparison.message;
  }
  summary["ok"] = failure.empty();
  out << (json ? report::dumpJson(summary) : text.str());
  if (!failure.empty())
    return reportError("cleave verify", Error(ErrorCode::InvalidArgument) << failure, err);
  return kExitOk;
}

} // namespace cleave::cli
