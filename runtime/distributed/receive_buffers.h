// runtime/distributed/receive_buffers.h - the buffers a rank receives messages into, reused across
// microbatches and steps: a receive takes a buffer when it is posted, and the buffer is free again
// once nothing but the pool holds its storage (the stage that read the value dropped it after its
// backward, or W; autograd's saved tensors keep it taken while they live). So a rank holds only
// the buffers its schedule has in flight, which `cleave schedule --simulate` predicts from the
// schedule, its receive lookahead and the bytes of each message (pipeline/schedule_sim.h); torch's
// pipelining allocates one per microbatch up front (pytorch/pytorch#136380).
//
// Guarantees: a taken buffer is never handed out again while any tensor shares its storage; the
// smallest free buffer that fits with at most a quarter to spare is taken (so what is taken stays
// within a quarter of the messages' bytes, and exactly them when shapes are fixed), else a new one
// is made; a buffer no receive took during a whole step is let go at the next (resetPeak), so with
// shapes that change the pool keeps only what recent steps used. A CUDA buffer is reused on the transport's stream after the compute that
// read it was issued (NCCL's receive waits for the compute stream at issue: nccl_streams.h).
// Complexity: take() O(buffers held).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace cleave::runtime::distributed {

struct ReceiveBufferStats {
  std::int64_t heldBytes = 0;      // the pool's buffers, taken or free, as the step began and grew
  std::int64_t peakTakenBytes = 0; // the most bytes taken at once since resetPeak()
  std::int64_t buffersMade = 0;    // allocations so far (the rest of the takes reused one)
  std::int64_t takes = 0;
};

class ReceiveBuffers {
public:
  // A dense tensor of `dims` and `type` on `device` over a pooled buffer.
  at::Tensor take(at::ScalarType type, const std::vector<std::int64_t>& dims, const at::Device& device);
  ReceiveBufferStats stats() const { return stats_; }
  // A step begins: lets go of the free buffers the last step never took, and starts a new peak
  // at what is taken now.
  void resetPeak();

private:
  struct Buffer {
    at::Tensor bytes; // uint8, its own storage
    bool used = false; // taken since the last resetPeak
  };
  static bool isFree(const at::Tensor& buffer) { return buffer.storage().use_count() == 1; }
  std::int64_t takenBytes() const;
  std::vector<Buffer> buffers_;
  ReceiveBufferStats stats_;
};

} // namespace cleave::runtime::distributed
