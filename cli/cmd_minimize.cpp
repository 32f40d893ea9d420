// cli/cmd_minimize.cpp - `cleave minimize MODEL --profile P --backend-a A --backend-b B
// [--mode M] [-o DIR]`: the smallest node set where B fails or disagrees with A; the culprit is
// written as a repro submodel with its inputs.
#include "base/file_io.h"
#include "cli/commands.h"
#include "cli/runtime_library.h"
#include "cli/options.h"
#include "cli/runtime_inputs.h"
#include "io/model_loader.h"
#include "io/onnx.h"
#include "report/minimize_report.h"
#include "runtime/model/host_backend.h"
#include "runtime/model/minimizer.h"

namespace cleave::cli {

namespace {
struct MinimizeFlags {
  std::string path, profilePath;
  OutputDirectoryFlags output;
  RuntimeOptions runtime;
  runtime::AllClose tolerance = runtime::kCutTolerance;
  report::MinimizeRun run{.backendA = runtime::kHostBackend, .backendB = {}, .mode = runtime::MinimizeMode::Binary,
                          .candidates = 0, .result = {}};
  bool json = false;
};

void describe(CLI::App& app, MinimizeFlags& flags) {
  app.description("Find the smallest set of nodes (among those the profile supports) where backend B fails or "
                  "disagrees with backend A beyond tolerance, and write it as a repro submodel.");
  addModelInput(app, flags.path);
  app.add_option("--profile", flags.profilePath, "support profile: its supported nodes are the candidates")
      ->required();
  app.add_option("--backend-a", flags.run.backendA, "reference backend")->capture_default_str();
  app.add_option("--backend-b", flags.run.backendB, "backend under test")->required();
  addEnumOption(app, "--mode", flags.run.mode, runtime::kMinimizeModes, "search");
  addOutputDirectory(app, flags.output, "write the culprit: repro.onnx, repro_inputs.json, report.json");
  app.add_option("--inputs", flags.runtime.inputsPath, "input tensors (.json, .pb, .npy, .npz or a folder); default: random from --seed");
  app.add_option("--seed", flags.runtime.seed, "seed of the random inputs")->capture_default_str();
  app.add_option("--rtol", flags.tolerance.rtol, "relative tolerance")->capture_default_str()->check(kFinite);
  app.add_option("--atol", flags.tolerance.atol, "absolute tolerance")->capture_default_str()->check(kFinite);
  addJsonFlag(app, flags.json);
}

// repro.onnx (the first culprit as a model), repro_inputs.json and report.json, committed whole.
Status writeRepro(const runtime::ReferenceRun& reference, const runtime::MinimizeResult& result,
                  const Json& summary, OutputDirectory& outDir) {
  if (result.culprits.empty())
    return Error(ErrorCode::NotFound) << "no culprit to write to " << outDir.finalPath();
  CLEAVE_TRY(auto repro, runtime::extractNodes(reference, result.culprits.front().nodes));
  CLEAVE_TRY(std::string reproInputs, runtime::formatTensorFile(repro.second));
  const std::string& staging = outDir.stagingPath();
  CLEAVE_CHECK(io::writeOnnx(repro.first, staging + "/repro.onnx"));
  CLEAVE_CHECK(writeFileAtomically(staging + "/repro_inputs.json", reproInputs));
  CLEAVE_CHECK(writeFileAtomically(staging + "/report.json", dumpJson(summary)));
  return outDir.commit();
}

Status minimizeModel(MinimizeFlags& flags, std::ostream& out, std::ostream&) {
  CLEAVE_TRY(support::Profile profile, support::Profile::load(flags.profilePath));
  CLEAVE_TRY(std::unique_ptr<runtime::Backend> a, runtime::makeBackend(flags.run.backendA));
  CLEAVE_TRY(std::unique_ptr<runtime::Backend> b, runtime::makeBackend(flags.run.backendB));
  CLEAVE_TRY(std::optional<OutputDirectory> outDir,
             openOutputDirectory(flags.output, {flags.path, flags.profilePath, flags.runtime.inputsPath}));
  CLEAVE_TRY(ir::Graph loaded, io::loadModel(flags.path));
  auto graph = std::make_shared<const ir::Graph>(std::move(loaded));
  CLEAVE_TRY(runtime::TensorMap inputs, makeInputs(*graph, flags.runtime));
  Expected<runtime::ReferenceRun> reference = runtime::ReferenceRun::run(graph, *a, inputs);
  if (!reference)
    return reference.error().withContext("backend " + flags.run.backendA);
  std::vector<ir::NodeId> candidates;
  for (std::uint32_t n = 0; n < graph->numNodes(); ++n)
    if (graph->isCallable(ir::NodeId{n}) && profile.decide(*graph, ir::NodeId{n}).supported)
      candidates.push_back(ir::NodeId{n});
  flags.run.candidates = candidates.size();
  flags.run.result = runtime::minimize(*reference, candidates, *b, flags.tolerance, flags.run.mode);
  Json summary = report::minimizeReportJson(*graph, flags.run);
  if (outDir)
    CLEAVE_CHECK(writeRepro(*reference, flags.run.result, summary, *outDir));
  out << (flags.json ? dumpJson(summary) : report::minimizeReportText(*graph, flags.run));
  return {};
}
} // namespace

const CommandBody kMinimizeBody{"minimize", parseThenRun<MinimizeFlags, describe, minimizeModel>};

} // namespace cleave::cli
