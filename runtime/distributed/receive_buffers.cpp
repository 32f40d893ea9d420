#include "runtime/distributed/receive_buffers.h"

#include <algorithm>

namespace cleave::runtime::distributed {

std::int64_t ReceiveBuffers::takenBytes() const {
  std::int64_t taken = 0;
  for (const Buffer& buffer : buffers_)
    if (!isFree(buffer.bytes))
      taken += buffer.bytes.numel();
  return taken;
}

void ReceiveBuffers::resetPeak() {
  std::erase_if(buffers_, [](const Buffer& buffer) { return !buffer.used && isFree(buffer.bytes); });
  for (Buffer& buffer : buffers_)
    buffer.used = false;
  stats_.heldBytes = 0;
  for (const Buffer& buffer : buffers_)
    stats_.heldBytes += buffer.bytes.numel();
  stats_.peakTakenBytes = takenBytes();
}

at::Tensor ReceiveBuffers::take(at::ScalarType type, const std::vector<std::int64_t>& dims, const at::Device& device) {
  std::int64_t elements = 1;
  for (std::int64_t dim : dims)
    elements *= dim;
  const std::int64_t bytes = std::max<std::int64_t>(elements * static_cast<std::int64_t>(c10::elementSize(type)), 1);
  // The smallest free buffer on the device that fits without wasting more than a quarter.
  Buffer* fit = nullptr;
  for (Buffer& buffer : buffers_) {
    const std::int64_t capacity = buffer.bytes.numel();
    if (buffer.bytes.device() == device && capacity >= bytes && capacity - bytes <= bytes / 4 &&
        isFree(buffer.bytes) && (!fit || capacity < fit->bytes.numel()))
      fit = &buffer;
  }
  if (!fit) { // a new one, in place of the largest free one (which would otherwise sit idle)
    Buffer* idle = nullptr;
    for (Buffer& buffer : buffers_)
      if (buffer.bytes.device() == device && isFree(buffer.bytes) && (!idle || buffer.bytes.numel() > idle->bytes.numel()))
        idle = &buffer;
    Buffer made{at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(device)), false};
    stats_.heldBytes += bytes - (idle ? idle->bytes.numel() : 0);
    if (idle) {
      *idle = std::move(made);
      fit = idle;
    } else {
      buffers_.push_back(std::move(made));
      fit = &buffers_.back();
    }
    stats_.buffersMade += 1;
  }
  fit->used = true;
  ++stats_.takes;
  at::Tensor view = at::empty({0}, at::TensorOptions().dtype(type).device(device));
  view.set_(fit->bytes.storage(), 0, dims); // contiguous strides
  stats_.peakTakenBytes = std::max(stats_.peakTakenBytes, takenBytes());
  return view;
}

} // namespace cleave::runtime::distributed
