#include "runtime/model/device_replay.h"

#include <sstream>

#include "runtime/engine/kernel.h"

namespace cleave::runtime {
namespace {

std::string signatureOf(const TensorMap& inputs) {
  std::ostringstream key;
  for (const auto& [name, tensor] : inputs) {
    key << name << ':';
    if (tensor.defined() && !isSequence(tensor))
      key << c10::toString(tensor.scalar_type()) << tensor.sizes();
    key << ';';
  }
  return key.str();
}

// Why `inputs` cannot be recorded, or empty.
std::string unrecordableInput(const TensorMap& inputs) {
  for (const auto& [name, tensor] : inputs)
    if (!holdsNumbers(tensor))
      return "input '" + name + "' is not a tensor of numbers (a host object)";
  return {};
}

} // namespace

Expected<ReplayedRuns::Recording> ReplayedRuns::record(const TensorMap& inputs, const EagerRun& eager) {
  Recording recording;
  if (std::string why = unrecordableInput(inputs); !why.empty()) {
    if (refusal_.empty())
      refusal_ = why;
    return recording;
  }
  auto buffers = std::make_shared<Buffers>();
  for (const auto& [name, tensor] : inputs)
    buffers->inputs[name] = at::empty_like(tensor, tensor.options().device(device_)).copy_(tensor);
  // The recorded run keeps its outputs: the buffers each replay writes (or, rerun, replaces).
  auto work = [buffers, eager]() -> Status {
    CLEAVE_TRY(buffers->outputs, eager(buffers->inputs));
    return {};
  };
  Expected<std::unique_ptr<DeviceRecording>> replayer = recordDeviceWork(device_, work);
  if (!replayer) {
    if (replayer.error().code() != ErrorCode::Unsupported)
      return std::move(replayer).error();
    if (refusal_.empty())
      refusal_ = replayer.error().message();
    return recording;
  }
  recording.buffers = std::move(buffers);
  recording.replayer = std::move(*replayer);
  return recording;
}

Expected<TensorMap> ReplayedRuns::run(const TensorMap& inputs, const EagerRun& eager) {
  const std::string signature = signatureOf(inputs);
  auto found = bySignature_.find(signature);
  if (found == bySignature_.end()) {
    CLEAVE_TRY(Recording recording, record(inputs, eager));
    found = bySignature_.emplace(signature, std::move(recording)).first;
  } else if (found->second.replayer) {
    for (auto& [name, buffer] : found->second.buffers->inputs)
      buffer.copy_(inputs.at(name));
  }
  Recording& recording = found->second;
  if (!recording.replayer)
    return eager(inputs);
  recording.replayer->replay();
  return recording.buffers->outputs;
}

std::size_t ReplayedRuns::recorded() const {
  std::size_t count = 0;
  for (const auto& [signature, recording] : bySignature_)
    count += recording.replayer != nullptr;
  return count;
}

std::size_t ReplayedRuns::refused() const { return bySignature_.size() - recorded(); }

} // namespace cleave::runtime
