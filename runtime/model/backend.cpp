#include "runtime/model/backend.h"

#include "base/strings.h"
#include "runtime/model/wing_library.h"
#include "split/shape_prologue.h"
#include "runtime/model/host_backend.h"

namespace cleave::runtime {

namespace {
class ExecutorModule final : public LoweredModule {
public:
  explicit ExecutorModule(std::unique_ptr<Executor> executor, at::Device device)
      : executor_(std::move(executor)), device_(device) {}
  Expected<TensorMap> run(const TensorMap& inputs, RunStats* stats, const Executor::Observer* observe,
                          OutputLayout outputLayout) override {
    return executor_->run(inputs, stats, observe, outputLayout);
  }
  at::Device device() const override { return device_; }

private:
  std::unique_ptr<Executor> executor_;
  at::Device device_;
};

class AtenBackend final : public Backend {
public:
  AtenBackend(std::string name, const BackendDevice& named, Optimizations optimizations)
      : name_(std::move(name)), device_(named.device), optimizations_(std::move(optimizations)),
        floatType_(named.floatType), separateHostMemory_(named.separateHostMemory) {}
  const std::string& name() const override { return name_; }
  at::Device device() const override { return device_; }
  bool keepsHostMemoryApart() const override { return separateHostMemory_ || !device_.is_cpu(); }
  Expected<std::unique_ptr<LoweredModule>> lower(std::shared_ptr<const ir::Graph> graph) const override {
    CLEAVE_TRY(std::unique_ptr<Executor> executor, makeExecutor(std::move(graph), false));
    return std::unique_ptr<LoweredModule>(new ExecutorModule(std::move(executor), device_));
  }
  Expected<std::unique_ptr<Executor>> lowerTrainable(std::shared_ptr<const ir::Graph> graph) const override {
    if (floatType_)
      return Error(ErrorCode::Unsupported) << "backend " << name_ << " does not train: it computes in "
                                           << c10::toString(*floatType_)
                                           << " without float32 master weights (train on aten-cpu or aten-cuda)";
    return makeExecutor(std::move(graph), true);
  }

private:
  Expected<std::unique_ptr<Executor>> makeExecutor(std::shared_ptr<const ir::Graph> graph, bool trainable) const {
    if (Status usable = deviceUsable(device_); !usable)
      return Error(ErrorCode::Unsupported) << "backend " << name_ << ": " << usable.error().message();
    ExecutorOptions options;
    options.device = device_;
    options.floatType = floatType_;
    options.optimizations = optimizations_;
    options.trainable = trainable;
    options.separateHostMemory = separateHostMemory_;
    return Executor::create(std::move(graph), options);
  }

  std::string name_;
  at::Device device_;
  Optimizations optimizations_;
  std::optional<at::ScalarType> floatType_;
  bool separateHostMemory_;
};

class ProfileBackend final : public Backend {
public:
  ProfileBackend(std::string name, support::Profile profile, Optimizations optimizations)
      : name_(std::move(name)), profile_(std::move(profile)), optimizations_(optimizations) {}
  const std::string& name() const override { return name_; }
  at::Device device() const override { return at::kCPU; }
  Expected<std::unique_ptr<LoweredModule>> lower(std::shared_ptr<const ir::Graph> graph) const override {
    CLEAVE_CHECK(checkSupported(*graph));
    return AtenBackend(kHostBackend, BackendDevice{}, optimizations_).lower(std::move(graph));
  }
  Expected<std::unique_ptr<Executor>> lowerTrainable(std::shared_ptr<const ir::Graph> graph) const override {
    CLEAVE_CHECK(checkSupported(*graph));
    return AtenBackend(kHostBackend, BackendDevice{}, optimizations_).lowerTrainable(std::move(graph));
  }

private:
  // Fails: Unsupported naming the first node the profile does not support, and why. The shape
  // prologue that split keeps with acc submodules (split/shape_prologue.h) runs on the host, as
  // an accelerator's runtime computes its shape tensors, so it is not refused.
  Status checkSupported(const ir::Graph& graph) const {
    split::SplitDecisions decided = split::decideForSplit(graph, profile_, true);
    for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
      ir::NodeId node{n};
      if (!graph.isCallable(node))
        continue;
      const support::Decision& decision = decided.decisions[node];
      if (!decision.supported)
        return Error(ErrorCode::Unsupported) << "backend " << name_ << " refuses node '" << graph.name(node) << "' ("
                                             << graph.target(node) << "): " << support::reasonName(decision.reason)
                                             << (decision.detail.empty() ? "" : ", " + decision.detail);
    }
    return {};
  }

  std::string name_;
  support::Profile profile_;
  Optimizations optimizations_;
};
} // namespace

namespace {
constexpr std::string_view kProfilePrefix = "profile:";

bool isProfileBackend(const std::string& spec) { return spec.rfind(kProfilePrefix, 0) == 0; }

// Every backend name this build answers to, as usage lists them: the installed wings', the wing
// libraries' (loaded or not), then profile:FILE.
std::vector<std::string> knownBackendNames() {
  std::vector<std::string> names = installedBackendNames();
  for (std::string& name : wingLibraryBackendNames())
    if (std::find(names.begin(), names.end(), name) == names.end())
      names.push_back(std::move(name));
  names.emplace_back("profile:FILE");
  return names;
}
} // namespace

Expected<BackendDevice> backendDevice(const std::string& spec) {
  if (isProfileBackend(spec)) // a stand-in accelerator, run on the CPU
    return BackendDevice{at::kCPU, std::nullopt};
  // A wing built as its own library answers to its names once loaded (wing_library.h).
  CLEAVE_CHECK(loadBackendWing(spec));
  std::optional<Expected<BackendDevice>> named = backendDeviceNamed(spec);
  if (!named)
    return Error(ErrorCode::InvalidArgument) << "unknown backend '" << spec
                                             << "' (backends: " << joinStrings(knownBackendNames()) << ")";
  return std::move(*named);
}

Expected<std::unique_ptr<Backend>> makeBackend(const std::string& spec, const Optimizations& optimizations) {
  if (isProfileBackend(spec)) {
    CLEAVE_TRY(support::Profile profile, support::Profile::load(spec.substr(kProfilePrefix.size())));
    return std::unique_ptr<Backend>(new ProfileBackend(spec, std::move(profile), optimizations));
  }
  CLEAVE_TRY(BackendDevice named, backendDevice(spec));
  if (named.floatType && optimizations.precision != Precision::Fp32)
    return Error(ErrorCode::Usage) << "--precision " << kPrecisions.name(optimizations.precision) << " on backend "
                                   << spec << ", which computes everything in " << c10::toString(*named.floatType)
                                   << " already (mixed precision runs on aten-cpu and aten-cuda)";
  return std::unique_ptr<Backend>(new AtenBackend(spec, named, optimizations));
}

} // namespace cleave::runtime
