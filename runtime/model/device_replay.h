// runtime/model/device_replay.h - a model's device work recorded once per input signature and
// replayed (CUDA graphs, through the device wing's record hook): `cleave run --graph-replay`.
//
// Guarantees:
//   - a signature is the inputs' names, element types and shapes; the first run of a signature
//     copies its inputs into buffers on the device, records a run that reads them (the wing warms
//     up first), and keeps that run's outputs as its result buffers; every run of a recorded
//     signature copies its inputs into those buffers, replays, and returns the result buffers,
//     which the next run of that signature overwrites;
//   - the host side of a recorded run runs once, when it is recorded. It may depend on the shapes
//     (fixed by the signature) but not on input values: every input is on the device, so a host
//     step that reads one copies it to the host, which the device refuses inside a recording.
//     A signature whose recording the device refused runs eagerly from then on, and the reason is
//     kept (refusal());
//   - inputs that are sequences or strings are refused for recording (they are host objects).
// Complexity: a replayed run is O(inputs) host work plus the copies and one replay; recording is
// two eager runs.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "runtime/engine/device_wing.h"
#include "runtime/engine/tensors.h"

namespace cleave::runtime {

class ReplayedRuns {
public:
  using EagerRun = std::function<Expected<TensorMap>(const TensorMap& inputs)>;
  explicit ReplayedRuns(at::Device device) : device_(device) {}

  // Runs `inputs` by replaying their signature's recording, recording it first on a new signature;
  // `eager` is the model's own run (what is recorded, and what runs where recording was refused);
  // a recording keeps a copy of it, so what it refers to must outlive this object.
  // Fails: what `eager` fails with.
  Expected<TensorMap> run(const TensorMap& inputs, const EagerRun& eager);

  std::size_t recorded() const;            // signatures replayed from a recording
  std::size_t refused() const;             // signatures that run eagerly
  const std::string& refusal() const { return refusal_; } // the first refusal's reason, or empty

private:
  // On the device: what the recording reads, and what it wrote (each call of the recorded work
  // replaces them: a wing that replays by calling it again, the CPU's, leaves its results here).
  struct Buffers {
    TensorMap inputs, outputs;
  };
  struct Recording {
    std::shared_ptr<Buffers> buffers;          // shared with the recorded work
    std::unique_ptr<DeviceRecording> replayer; // null: refused, run eagerly
  };
  Expected<Recording> record(const TensorMap& inputs, const EagerRun& eager);

  at::Device device_;
  std::map<std::string, Recording> bySignature_;
  std::string refusal_;
};

} // namespace cleave::runtime
