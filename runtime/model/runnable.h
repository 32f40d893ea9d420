// runtime/model/runnable.h - a model file or a cut-model directory behind one interface, for the
// commands that run things (run, verify): open, make inputs, run with per-submodule timings.
// Complexity: that of the model or cut model it wraps.
#pragma once

#include <optional>

#include "runtime/model/cut_model.h"
#include "runtime/model/tensor_files.h"

namespace cleave::runtime {

class Runnable {
public:
  // A directory with plan.json is a cut model (CutModel::load: acc submodules on `acc`, the rest
  // on `cpu`, a partition on its device's backend where the plan names one; `joinSeams` and
  // `optimizations`: CutModelOptions'); any other path is a model, run whole on `acc`.
  static Expected<Runnable> open(const std::string& path, const Backend& acc, const Backend& cpu,
                                 bool joinSeams = false, const Optimizations& optimizations = {});

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
  bool isCut() const { return cut_.has_value(); }
  std::size_t submodules() const { return cut_ ? cut_->size() : 1; }
  // Modules a run runs: fewer than submodules() when a cut's seams are joined.
  std::size_t modules() const { return cut_ ? cut_->modules() : 1; }

private:
  std::shared_ptr<const ir::Graph> graph_; // a whole model
  std::unique_ptr<LoweredModule> module_;
  std::string backend_;
  std::optional<CutModel> cut_;
};

} // namespace cleave::runtime
