#include "cli/runtime_inputs.h"

#include "cli/commands.h"
#include "runtime/cuda/cuda_switches.h"
#include "runtime/model/tensor_files.h"
#include "runtime/model/host_backend.h"

namespace cleave::cli {

Expected<OpenedRunnable> openRunnable(const std::string& path, const RuntimeOptions& options) {
  OpenedRunnable opened;
  CLEAVE_TRY(opened.acc, runtime::makeBackend(options.backend, options.optimizations));
  if (options.optimizations.wing.isOn(runtime::cuda::kTf32) && !opened.acc->device().is_cuda())
    return usageError() << "--tf32 applies to --backend aten-cuda; " << options.backend
                        << " computes float32 as float32";
  CLEAVE_TRY(opened.cpu, runtime::makeBackend(runtime::kHostBackend, options.optimizations));
  CLEAVE_TRY(opened.runnable, runtime::Runnable::open(path, *opened.acc, *opened.cpu, options.optimizations.joinSeams,
                                                                options.optimizations));
  return opened;
}

Expected<runtime::TensorMap> makeInputs(const runtime::Runnable& runnable, const RuntimeOptions& options) {
  if (!options.inputsPath.empty())
    return runtime::readTensors(options.inputsPath, runnable.inputNames(), runnable.inputProtoKinds());
  CLEAVE_TRY(auto dims, parseDims(options.dims));
  return runnable.randomInputs(options.seed, dims);
}

Expected<runtime::TensorMap> makeInputs(const ir::Graph& graph, const RuntimeOptions& options) {
  if (!options.inputsPath.empty())
    return runtime::readTensors(options.inputsPath, ir::graphInputNames(graph), runtime::containerValues(graph));
  CLEAVE_TRY(auto dims, parseDims(options.dims));
  return runtime::randomInputs(graph, options.seed, 10, dims);
}

} // namespace cleave::cli
