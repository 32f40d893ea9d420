// runtime/distributed/communicator.h - point-to-point tensors between ranks on PyTorch's own
// distributed engine: a c10d TCPStore (rank 0 serves it at MASTER_ADDR:MASTER_PORT) and a
// ProcessGroupGloo over TCP.
//
// Guarantees: connect() returns once every rank has joined, or an Error naming the address and
// the timeout. send() returns at once (the transfer completes when the receiver posts its
// receive; finish() waits for every send); recv() blocks until the tensor arrives, or fails
// after the timeout naming the peer and the tag. Tensors travel dense and contiguous; each is
// preceded by a small header (dtype and dims), so a receiver needs no shape in advance (an
// uneven last microbatch works). c10d's exceptions become one-line Errors.
// Complexity: per tensor, one header of 18 int64 plus its bytes.
#pragma once

#include <ATen/ATen.h>

#include <memory>

#include "base/expected.h"
#include "runtime/distributed/environment.h"

namespace cleave::runtime::distributed {

class Communicator {
public:
  static Expected<std::unique_ptr<Communicator>> connect(const DistributedEnv& env);
  // One rank, no peers: what a plan runs on in a single process.
  static std::unique_ptr<Communicator> local();
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  virtual Status send(const at::Tensor& tensor, int dst, std::uint32_t tag) = 0;
  virtual Expected<at::Tensor> recv(int src, std::uint32_t tag) = 0;
  virtual Status finish() = 0; // waits for every send posted so far
  virtual Status barrier() = 0;
  // Sums `tensor` (dense, contiguous, on the CPU) over every rank, in place.
  virtual Status allReduceSum(at::Tensor& tensor) = 0;
};

} // namespace cleave::runtime::distributed
