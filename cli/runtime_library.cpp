// cli/runtime_library.cpp - libcleave_runtime.so's one entry (cli/runtime_library.h): the running
// commands' bodies, split's model run and inspect's missing kernels.
#include "cli/runtime_library.h"

#include <memory>

#include "base/json.h"
#include "cli/runtime_inputs.h"
#include "runtime/engine/kernel.h"
#include "runtime/model/lower_and_run.h"
#include "runtime/model/host_backend.h"

namespace cleave::cli {

namespace {
report::SubmoduleTrialLine trialLine(const runtime::ReferenceRun& reference, const runtime::SubmoduleTrial& trial) {
  report::SubmoduleTrialLine line{trial.name, std::string(runtime::trialOutcomeName(trial.result.outcome)),
                                  trial.result.passed() ? "" : trial.result.message, trial.result.maxAbs,
                                  trial.result.maxRel, trial.result.maxScaled};
  if (trial.culprit) {
    line.culpritNode = reference.graph().name(*trial.culprit);
    line.culpritOp = reference.graph().target(*trial.culprit);
    line.culpritOutcome = runtime::trialOutcomeName(trial.culpritResult.outcome);
    line.culpritMessage = trial.culpritResult.message;
  }
  return line;
}

// Runs the model once on the CPU: each acc submodule tried on the backend, and/or every
// submodule's inputs captured.
Expected<SplitRunResult> runSplitModel(const SplitRunRequest& request) {
  const RuntimeOptions& options = request.options;
  std::shared_ptr<const ir::Graph> shared(&request.graph, [](const ir::Graph*) {}); // not owning: the caller's
  CLEAVE_TRY(std::unique_ptr<runtime::Backend> acc, runtime::makeBackend(options.backend, options.optimizations));
  CLEAVE_TRY(std::unique_ptr<runtime::Backend> cpu, runtime::makeBackend(runtime::kHostBackend, options.optimizations));
  CLEAVE_TRY(runtime::TensorMap inputs, makeInputs(request.graph, options));
  CLEAVE_TRY(runtime::ReferenceRun reference, runtime::ReferenceRun::run(shared, *cpu, inputs));
  SplitRunResult result;
  if (request.dumpInputs) {
    Json all = Json::object();
    for (std::size_t s = 0; s < request.boundaries.size(); ++s) {
      CLEAVE_TRY(std::string text, runtime::formatTensorFile(reference.valuesByName(request.boundaries[s].inputs)));
      all[request.plan.submodules[s].name] = Json::parse(text);
    }
    result.submoduleInputs = toJsonText(all) + "\n";
  }
  if (request.lowerAndRun) {
    CLEAVE_TRY(std::vector<runtime::SubmoduleTrial> tried,
               runtime::tryAccSubmodules(reference, request.plan, *acc, request.tolerance));
    for (const runtime::SubmoduleTrial& trial : tried)
      result.trials.push_back(trialLine(reference, trial));
  }
  return result;
}

const CommandBody* const kBodies[] = {&kRunBody, &kVerifyBody, &kShapesBody, &kMinimizeBody, &kTrainBody, &kLaunchBody};
const RuntimeLibrary kLibrary{kRuntimeLibraryVersion, kBodies, runSplitModel, runtime::missingKernels};
} // namespace

} // namespace cleave::cli

extern "C" const cleave::cli::RuntimeLibrary* cleave_runtime_library() { return &cleave::cli::kLibrary; }
