// cli/cmd_minimize.cpp - `cleave minimize MODEL --profile P --backend-a A --backend-b B
// [--mode M] [-o DIR]`: the smallest node set where B fails or disagrees with A; the culprit is
// written as a repro submodel with its inputs.
#include <sstream>

#include "base/file_io.h"
#include "cli/commands.h"
#include "cli/output_options.h"
#include "cli/runtime_options.h"
#include "io/model_loader.h"
#include "io/onnx.h"
#include "report/json_util.h"
#include "runtime/minimizer.h"

namespace cleave::cli {

int runMinimize(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Find the smallest set of nodes (among those the profile supports) where backend B fails or "
               "disagrees with backend A beyond tolerance, and write it as a repro submodel.",
               "cleave minimize"};
  std::string path, profilePath, backendA = "aten-cpu", backendB, modeName = "binary";
  OutputDirectoryFlags output;
  RuntimeOptions runtime;
  runtime::Tolerance tolerance;
  bool json = false;
  app.add_option("MODEL", path, "ONNX model")->required();
  app.add_option("--profile", profilePath, "support profile: its supported nodes are the candidates")->required();
  app.add_option("--backend-a", backendA, "reference backend")->capture_default_str();
  app.add_option("--backend-b", backendB, "backend under test")->required();
  app.add_option("--mode", modeName, "sequential, binary, accumulate or block")->capture_default_str();
  addOutputDirectory(app, output, "write the culprit: repro.onnx, repro_inputs.json, report.json");
  app.add_option("--inputs", runtime.inputsPath, "input tensors (JSON); default: random from --seed");
  app.add_option("--seed", runtime.seed, "seed of the random inputs")->capture_default_str();
  app.add_option("--rtol", tolerance.rtol, "relative tolerance")->capture_default_str();
  app.add_option("--atol", tolerance.atol, "absolute tolerance")->capture_default_str();
  app.add_flag("--json", json, "print a JSON report");
  if (int code = parseArguments(app, args, out, err); code >= 0)
    return code;
  std::optional<runtime::MinimizeMode> mode = runtime::parseMinimizeMode(modeName);
  if (!mode) {
    err << "cleave minimize: usage error: --mode is sequential, binary, accumulate or block, not '" << modeName << "'\n";
    return kExitUsage;
  }
  Expected<support::Profile> profile = support::Profile::load(profilePath);
  if (!profile)
    return reportError("cleave minimize", profile.error(), err);
  Expected<std::unique_ptr<runtime::Backend>> a = runtime::makeBackend(backendA);
  if (!a)
    return reportError("cleave minimize", a.error(), err);
  Expected<std::unique_ptr<runtime::Backend>> b = runtime::makeBackend(backendB);
  if (!b)
    return reportError("cleave minimize", b.error(), err);
  Expected<std::optional<OutputDirectory>> opened =
      openOutputDirectory(output, {path, profilePath, runtime.inputsPath});
  if (!opened)
    return reportError("cleave minimize", opened.error(), err);
  std::optional<OutputDirectory> outDir = std::move(*opened);
  Expected<ir::Graph> loaded = io::loadModel(path);
  if (!loaded)
    return reportError("cleave minimize", loaded.error(), err);
  auto graph = std::make_shared<const ir::Graph>(std::move(*loaded));
  Expected<runtime::TensorMap> inputs = makeInputs(*graph, runtime);
  if (!inputs)
    return reportError("cleave minimize", inputs.error(), err);
  Expected<runtime::ReferenceRun> reference = runtime::ReferenceRun::run(graph, **a, *inputs);
  if (!reference)
    return reportError("cleave minimize", reference.error().withContext("backend " + backendA), err);
  std::vector<ir::NodeId> candidates;
  for (std::uint32_t n = 0; n < graph->numNodes(); ++n)
    if (graph->isCallable(ir::NodeId{n}) && profile->decide(*graph, ir::NodeId{n}).supported)
      candidates.push_back(ir::NodeId{n});
  runtime::MinimizeResult result = runtime::minimize(*reference, candidates, **b, tolerance, *mode);

  report::Json summary;
  summary["mode"] = modeName;
  summary["backend_a"] = backendA;
  summary["backend_b"] = backendB;
  summary["candidates"] = candidates.size();
  summary["trials"] = result.trials;
  summary["all_candidates_fail"] = result.wholeFails;
  report::Json culprits = report::Json::array();
  std::ostringstream text;
  text << "candidates: " << candidates.size() << " node(s) the profile supports; " << result.trials << " trial(s)\n";
  if (result.culprits.empty())
    text << "no culprit: " << backendB << " agrees with " << backendA << " on every tried set\n";
  for (const runtime::Culprit& culprit : result.culprits) {
    report::Json names = report::Json::array();
    text << "culprit (" << runtime::trialOutcomeName(culprit.result.outcome) << "):";
    for (ir::NodeId node : culprit.nodes) {
      names.push_back(std::string(graph->name(node)));
      text << " " << graph->name(node) << " (" << graph->target(node) << ")";
    }
    text << "\n  " << culprit.result.message << "\n";
    culprits.push_back({{"nodes", std::move(names)},
                        {"outcome", runtime::trialOutcomeName(culprit.result.outcome)},
                        {"message", culprit.result.message},
                        {"max_abs", culprit.result.maxAbs},
                        {"max_rel", culprit.result.maxRel}});
  }
  summary["culprits"] = std::move(culprits);
  if (outDir) {
    if (result.culprits.empty())
      return reportError("cleave minimize", Error(ErrorCode::NotFound) << "no culprit to write to " << outDir->finalPath(), err);
    Expected<std::pair<ir::Graph, runtime::TensorMap>> repro = runtime::extractNodes(*reference, result.culprits.front().nodes);
    if (!repro)
      return reportError("cleave minimize", repro.error(), err);
    Expected<std::string> reproInputs = runtime::formatTensorFile(repro->second);
    if (!reproInputs)
      return reportError("cleave minimize", reproInputs.error(), err);
    const std::string& staging = outDir->stagingPath();
    Status written = io::writeOnnx(repro->first, staging + "/repro.onnx");
    if (written)
      written = writeFileAtomically(staging + "/repro_inputs.json", *reproInputs);
    if (written)
      written = writeFileAtomically(staging + "/report.json", report::dumpJson(summary));
    if (written)
      written = outDir->commit();
    if (!written)
      return reportError("cleave minimize", written.error(), err);
  }
  out << (json ? report::dumpJson(summary) : text.str());
  return kExitOk;
}

} // namespace cleave::cli
