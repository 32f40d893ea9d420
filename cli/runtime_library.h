// cli/runtime_library.h - the runtime as a library the cleave executable loads when a command
// needs it, as ONNX Runtime loads its execution providers' libraries.
//
// Why: libtorch's static initializers take about 0.7 s and 160 MB on every start (several
// seconds under AddressSanitizer), so an executable linked with it makes `cleave split --help`
// or a bad flag as slow as a model run. The planning commands (inspect's counts, gen, convert,
// simplify, support, split, partition, pipeline, schedule) are the executable's and start in
// milliseconds; the running commands (run, verify, shapes, minimize, train, launch) and the parts
// of planning commands that run a model (split --preview --backend / --dump-inputs, inspect's
// missing kernels) are libcleave_runtime.so's, beside the executable, opened on first use.
//
// Guarantees: the executable and the library are built together from these declarations; the
// library checks kRuntimeLibraryVersion so a stale one is refused with a one-line error, never
// called. Nothing here includes ATen. Complexity: loading is dlopen's (libtorch's initializers);
// a lookup scans the few running commands.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/runtime_options.h"
#include "ir/graph.h"
#include "plan/materialize.h"
#include "report/split_report.h"
#include "runtime/model/tolerance.h"

namespace cleave::cli {

// The folder of the running executable, with its trailing slash (empty when unknown): where the
// runtime library and the device wings' libraries are.
std::string executableFolder();

// Raised whenever these declarations change, so that an executable never calls a library built
// from other ones.
inline constexpr int kRuntimeLibraryVersion = 1;

// A running command's body; its name and summary stay in the executable (cli/runtime_link.cpp),
// so `cleave --help` lists it without loading the library.
struct CommandBody {
  const char* name;
  int (*run)(const Command& command, const Args& args, std::ostream& out, std::ostream& err);
};

// In the library: cli/cmd_run.cpp, cmd_verify.cpp, ... define them.
extern const CommandBody kRunBody, kVerifyBody, kShapesBody, kMinimizeBody, kTrainBody, kLaunchBody;

// What split asks the runtime for: the model run once on the CPU, each acc submodule tried on
// `options.backend` (lowerAndRun) and/or every submodule's inputs captured (dumpInputs).
struct SplitRunRequest {
  const ir::Graph& graph;
  const plan::CutPlan& plan;
  const std::vector<plan::Boundary>& boundaries;
  const RuntimeOptions& options;
  runtime::AllClose tolerance;
  bool lowerAndRun = false, dumpInputs = false;
};
struct SplitRunResult {
  std::vector<report::SubmoduleTrialLine> trials; // lowerAndRun: one per acc submodule
  std::string submoduleInputs;                    // dumpInputs: submodule_inputs.json's text
};

struct RuntimeLibrary {
  int version = kRuntimeLibraryVersion;
  std::span<const CommandBody* const> commands;
  Expected<SplitRunResult> (*runSplitModel)(const SplitRunRequest& request);
  // Op types of an ONNX graph that no runtime kernel runs, sorted (inspect).
  std::vector<std::string> (*missingKernels)(const ir::Graph& graph);
};

// The library's one exported symbol.
extern "C" const RuntimeLibrary* cleave_runtime_library();

// The executable's side: libcleave_runtime.so from the executable's own folder, loaded once.
// An error (missing, unloadable, another version) names the file and why.
Expected<const RuntimeLibrary*> loadRuntimeLibrary();

} // namespace cleave::cli
