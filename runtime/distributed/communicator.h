// runtime/distributed/communicator.h - point-to-point tensors between ranks on PyTorch's own
// distributed engine: a c10d TCPStore (rank 0 serves it at MASTER_ADDR:MASTER_PORT) and a
// transport (transport.h): ProcessGroupGloo over TCP, or where libtorch has CUDA, NCCL.
//
// Guarantees: connect() returns once every rank has joined, or an Error naming the address and
// the timeout. send() returns at once (the transfer completes when the receiver posts its
// receive; finish() waits for every send); recv() blocks until the tensor arrives, or fails
// after the timeout naming the peer and the tag. Tensors travel dense and contiguous; the first
// tensor of a shape key (below) between two ranks is preceded by a small header (dtype and dims),
// so a receiver needs no shape in advance (an uneven last microbatch works); later tensors of that
// key travel alone, in one message, into a buffer of the remembered shape. c10d's exceptions become
// one-line Errors.
// Shape keys: a caller that knows a tensor's shape is a function of something both ranks know (a
// value, its direction, and the microbatch's row count) passes the same key on both sides; a send
// whose tensor does not have its key's remembered dtype and dims fails naming both (never a
// silent misread). Key 0 (the default): a header every time.
// A caller that knows a key's shape beforehand (from the plan) declares it on both ranks, so even
// the key's first message travels without a header.
// Posted receives: postRecv() starts a receive now (a Gloo transfer starts only once its receive
// is posted), so the data travels while this rank computes; the recv() of the same (peer, tag)
// then only waits for it. A receive whose key has no shape yet posts its header's receive, and its
// data's once the header is in.
// Failures across hosts: when a Gloo operation fails (a peer's connection closed, or the
// timeout ran out), the error also names the run's first failure if a launcher announced one
// (announceFailure below) within a short grace: a rank on one host then names the rank that died
// on another, not only the peer whose connection closed as a consequence.
// Transport CPU: the threads Gloo starts for this rank (its TCP I/O loop, which reads and writes
// the sockets, and the process group's workers) are told apart from the rest at connect; their
// CPU time is what the transport costs this rank beside its compute, which on a host whose cores
// are all computing comes out of the compute.
// Subgroups (subgroup()): the ranks of one pipeline, or the replicas of one pipeline rank, talk on
// a group of their own, made from the same store; rank numbers in its errors stay the world's.
// Matching (matchInOrder): by default a receive meets the send of its tag. NCCL has no tags: the
// k-th message a rank sends on a channel (to one peer) meets the peer's k-th receive posted from
// it. A Gloo communicator told to match in order does exactly that (the tag only names the
// message in errors), so CPU runs hold a caller to NCCL's rule; checked, every message also
// carries its tag in a header, and a receive that meets another message fails naming both.
// Receive buffers: a receive's data lands in a buffer of the communicator's pool
// (receive_buffers.h), so a rank holds the buffers its schedule has in flight, not one per message.
// Complexity: per tensor, its bytes, plus one header of 18 int64 the first time of its key.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <string>

#include "base/expected.h"
#include "runtime/distributed/environment.h"
#include "runtime/distributed/receive_buffers.h"

namespace cleave::runtime::distributed {

enum class ChannelMatching : std::uint8_t { ByTag, InOrder, InOrderChecked };

class Communicator {
public:
  // Over `transport` (transport.h: kHostTransport, or a wing's where this build has it); fails
  // naming the transports there are. Without one: over kHostTransport.
  static Expected<std::unique_ptr<Communicator>> connect(const DistributedEnv& env, const std::string& transport);
  static Expected<std::unique_ptr<Communicator>> connect(const DistributedEnv& env);
  // One rank, no peers: what a plan runs on in a single process.
  static std::unique_ptr<Communicator> local();
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  virtual Status send(const at::Tensor& tensor, int dst, std::uint32_t tag, std::uint64_t shapeKey = 0) = 0;
  virtual Expected<at::Tensor> recv(int src, std::uint32_t tag, std::uint64_t shapeKey = 0) = 0;
  // Both ranks of a channel declare its shape key's dtype and dims before its first message
  // (either direction: the key tells them apart); a declared key needs no header.
  virtual void declareShape(int peer, std::uint64_t shapeKey, at::ScalarType type, std::vector<std::int64_t> dims) = 0;
  // Starts recv(src, tag, shapeKey) ahead of time; posting one twice is a no-op.
  virtual Status postRecv(int src, std::uint32_t tag, std::uint64_t shapeKey = 0) = 0;
  virtual Status finish() = 0; // waits for every send posted so far
  // How receives meet sends from now on (above); both ends of a channel set it before its first
  // message. InOrder becomes InOrderChecked where the environment asks (CLEAVE_DIST_CHECK_ORDER).
  // A communicator without tags (NCCL) matches in order whatever it is told.
  virtual void setMatching(ChannelMatching matching) = 0;
  virtual std::size_t headersSent() const = 0; // shape headers sent so far
  // The buffers receives are made in (receive_buffers.h: reused once their readers let go), and
  // a new peak of what is taken at once (a step's).
  virtual ReceiveBufferStats receiveBuffers() const = 0;
  virtual void resetReceiveBufferPeak() = 0;
  // CPU seconds the transport's own threads have run so far (0 for a single process).
  virtual double transportCpuSeconds() const = 0;
  virtual Status barrier() = 0;
  // Collective over the world's ranks: every rank's `text` under `name`, by rank, through the
  // rendezvous store rather than the transport, so ranks meet here whatever plans they hold (a
  // transport message would wait on a peer that expects another). Each `name` once per run.
  // Fails after the timeout naming a rank that never published.
  virtual Expected<std::vector<std::string>> exchangeText(const std::string& name, const std::string& text) = 0;
  // Sums `tensor` (dense, contiguous, on the CPU) over every rank, in place.
  virtual Status allReduceSum(at::Tensor& tensor) = 0;
  // Starts that sum and returns at once: it runs on the transport's threads while this rank
  // computes; finish() waits for it (the tensor must not be read or written before). Every rank
  // posts the same reductions in the same order.
  virtual Status postAllReduceSum(const at::Tensor& tensor) = 0;
  // Collective over `members` (ranks of this communicator, ascending, this rank among them; each
  // member calls it with the same `name` and members, and the other ranks need not): a
  // communicator whose rank i is members[i], on a group of its own (its rendezvous under `name` in
  // the same store), so its messages and reductions never meet this one's. Its errors name ranks
  // as this communicator does. Fails: InvalidArgument (members malformed), rendezvous failures.
  virtual Expected<std::unique_ptr<Communicator>> subgroup(const std::string& name, const std::vector<int>& members) = 0;
};

// Records `failure` ("rank 3 died of signal Killed") as the run's first failure in the rendezvous
// store at masterAddr:masterPort, unless another launcher recorded one first. Best effort: gives
// up silently after `patience` (the store lives in rank 0, which may be gone). Silences stderr
// while it runs, so only a single-threaded process (the launcher) may call it.
void announceFailure(const std::string& masterAddr, std::uint16_t masterPort, const std::string& failure,
                     std::chrono::milliseconds patience);

} // namespace cleave::runtime::distributed
