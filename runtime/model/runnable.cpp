#include "runtime/model/runnable.h"

#include <chrono>

#include "io/model_loader.h"
#include "plan/plan_file.h"
#include "runtime/engine/device_wing.h"
#include "runtime/engine/kernel.h"

namespace cleave::runtime {

Expected<Runnable> Runnable::open(const std::string& path, const Backend& acc, const Backend& cpu, bool joinSeams,
                                  const Optimizations& optimizations) {
  Runnable runnable;
  runnable.device_ = acc.device();
  runnable.backend_ = acc.name();
  runnable.hostMemoryApart_ = acc.keepsHostMemoryApart();
  if (plan::isPlanDirectory(path)) {
    CutModelOptions options;
    options.joinSeams = joinSeams;
    options.optimizations = optimizations;
    CLEAVE_TRY(CutModel cut, CutModel::load(path, acc, cpu, options));
    runnable.cut_.emplace(std::move(cut));
    return runnable;
  }
  CLEAVE_TRY(ir::Graph graph, io::loadModel(path, {.expandFunctions = opsWithoutKernels()}));
  runnable.graph_ = std::make_shared<const ir::Graph>(std::move(graph));
  CLEAVE_TRY(runnable.module_, acc.lower(runnable.graph_));
  return runnable;
}

Status Runnable::replayDeviceWork() {
  const DeviceWing* wing = wingServing(device_);
  if (!wing || !wing->records() || !hostMemoryApart_)
    return Error(ErrorCode::Unsupported) << backend_
                                         << " records no device work to replay (graph replay needs aten-cuda, or "
                                            "aten-cpu-as-gpu to check a recording on the CPU)";
  replay_ = std::make_unique<ReplayedRuns>(device_);
  return {};
}

Expected<TensorMap> Runnable::run(const TensorMap& inputs, std::vector<SubmoduleTiming>* timings, RunStats* stats) {
  if (!replay_)
    return runEagerly(inputs, timings, stats);
  auto start = std::chrono::steady_clock::now();
  CLEAVE_TRY(TensorMap outputs, replay_->run(inputs, [this](const TensorMap& in) { return runEagerly(in, nullptr, nullptr); }));
  if (timings)
    timings->push_back({"replay", backend_,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
  return outputs;
}

Expected<TensorMap> Runnable::runEagerly(const TensorMap& inputs, std::vector<SubmoduleTiming>* timings,
                                         RunStats* stats) {
  if (cut_)
    return cut_->run(inputs, timings, stats);
  auto start = std::chrono::steady_clock::now();
  CLEAVE_TRY(TensorMap outputs, module_->run(inputs, stats));
  if (timings)
    timings->push_back({"model", backend_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
  return outputs;
}

std::vector<std::string> Runnable::inputNames() const {
  return cut_ ? cut_->graphInputs() : ir::graphInputNames(*graph_);
}

ProtoKinds Runnable::inputProtoKinds() const { return graph_ ? containerValues(*graph_) : ProtoKinds{}; }

std::vector<std::string> Runnable::outputNames() const {
  return cut_ ? cut_->graphOutputs() : ir::graphOutputNames(*graph_);
}

Expected<TensorMap> Runnable::randomInputs(std::uint64_t seed, const std::map<std::string, std::int64_t>& dims) const {
  if (!cut_)
    return runtime::randomInputs(*graph_, seed, 10, dims);
  return cut_->randomInputs(seed, dims);
}

} // namespace cleave::runtime
