// runtime/model/runnable.h - a model file or a cut-model directory behind one interface, for the
// commands that run things (run, verify): open, make inputs, run with per-submodule timings, and
// optionally replay recorded device work (device_replay.h).
// Complexity: that of the model or cut model it wraps.
#pragma once

#include <memory>
#include <optional>

#include "runtime/model/cut_model.h"
#include "runtime/model/device_replay.h"
#include "runtime/model/tensor_files.h"

namespace cleave::runtime {

class Runnable {
public:
  // A directory with plan.json is a cut model (CutModel::load: acc submodules on `acc`, the rest
  // on `cpu`, a partition on its device's backend where the plan names one; `joinSeams` and
  // `optimizations`: CutModelOptions'); any other path is a model, run whole on `acc`.
  static Expected<Runnable> open(const std::string& path, const Backend& acc, const Backend& cpu,
                                 bool joinSeams = false, const Optimizations& optimizations = {});

  // From now on, runs record their device work once per input signature and replay it
  // (ReplayedRuns on `acc`'s device): a replayed run reports one timing, "replay", and no
  // per-op statistics. On aten-cpu-as-gpu the CPU wing's recording checks what a GPU's would
  // refuse (a value crossing between host and device inside the recorded run) and replays by
  // running again. Fails: Unsupported where `acc` shares host memory (aten-cpu) or its wing
  // records nothing.
  Status replayDeviceWork();
  const ReplayedRuns* replayed() const { return replay_.get(); }

  // `stats` (optional) gathers every executor's statistics (per-op seconds when asked for).
  Expected<TensorMap> run(const TensorMap& inputs, std::vector<SubmoduleTiming>* timings = nullptr,
                          RunStats* stats = nullptr);
  // Random inputs (tensors.h: the same seed gives a model and its cut the same tensors).
  Expected<TensorMap> randomInputs(std::uint64_t seed, const std::map<std::string, std::int64_t>& dims = {}) const;
  // The model's input and output names, in the graph's (or the plan's) order: what unnamed tensors
  // bind to and what output_N.pb files are numbered by (tensor_files.h).
  std::vector<std::string> inputNames() const;
  std::vector<std::string> outputNames() const;
  // Inputs held in SequenceProto / OptionalProto files (a whole model's declared types).
  ProtoKinds inputProtoKinds() const;
  const CutModel* cut() const { return cut_ ? &*cut_ : nullptr; }
  std::size_t submodules() const { return cut_ ? cut_->size() : 1; }
  // Modules a run runs: fewer than submodules() when a cut's seams are joined.
  std::size_t modules() const { return cut_ ? cut_->modules() : 1; }

private:
  std::shared_ptr<const ir::Graph> graph_; // a whole model
  std::unique_ptr<LoweredModule> module_;
  std::string backend_; // acc's name
  std::optional<CutModel> cut_;
  at::Device device_{at::kCPU}; // acc's
  bool hostMemoryApart_ = false; // acc's (Backend::keepsHostMemoryApart)
  std::unique_ptr<ReplayedRuns> replay_;

  Expected<TensorMap> runEagerly(const TensorMap& inputs, std::vector<SubmoduleTiming>* timings, RunStats* stats);
};

} // namespace cleave::runtime
