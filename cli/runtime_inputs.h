// cli/runtime_inputs.h - what the running commands open from their shared options
// (cli/runtime_options.h): the backends and the model or cut model to run, and the inputs to run
// it on. In the runtime library (cli/runtime_library.h). Complexity: opening is the model's load;
// random inputs are linear in their elements.
#pragma once

#include <memory>
#include <string>

#include "cli/runtime_options.h"
#include "runtime/model/runnable.h"

namespace cleave::cli {

struct OpenedRunnable {
  std::unique_ptr<runtime::Backend> acc, cpu; // outlive the runnable's modules
  runtime::Runnable runnable;
};

Expected<OpenedRunnable> openRunnable(const std::string& path, const RuntimeOptions& options);
// --inputs FILE, else random inputs from --seed.
Expected<runtime::TensorMap> makeInputs(const runtime::Runnable& runnable, const RuntimeOptions& options);
Expected<runtime::TensorMap> makeInputs(const ir::Graph& graph, const RuntimeOptions& options);

} // namespace cleave::cli
