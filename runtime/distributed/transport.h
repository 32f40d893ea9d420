// runtime/distributed/transport.h - what a Communicator's messages and reductions travel on: a
// c10d backend over a group of ranks. Each lives in the wing whose device's tensors it carries and
// registers itself there before main: Gloo's (runtime/cpu/gloo_transport.cpp, the host transport
// every build has) carries CPU tensors and matches a receive to the send of its tag; NCCL's
// (runtime/cuda/nccl_transport.cpp, built where libtorch has CUDA) carries tensors on this rank's
// GPU, each channel (sender, receiver) on a communicator and CUDA stream of its own, and matches
// a channel's messages in order. A transport is a wing of the communicator as a device is of the
// executor: the communicator names none, and finds each by name in the registry.
//
// Guarantees of every transport: operations return at once with a c10d Work; a Work's wait()
// makes what the operation produced readable by what runs after it on this rank (on a GPU, by
// the current stream: the host does not block); send and recv move contiguous tensors on
// device(); c10d's failures surface as exceptions, which the communicator turns into Errors.
// Complexity: O(1) per operation besides the bytes it moves.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/expected.h"
#include "runtime/distributed/environment.h"

namespace cleave::runtime::distributed {

class Transport {
public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  // False: a channel's messages meet its receives in order, whatever their tags (NCCL).
  virtual bool tagged() const = 0;
  // Where the tensors it moves must be, and where received ones arrive.
  virtual at::Device device() const = 0;
  virtual c10::intrusive_ptr<c10d::Work> send(at::Tensor& tensor, int dst, int tag) = 0;
  virtual c10::intrusive_ptr<c10d::Work> recv(at::Tensor& tensor, int src, int tag) = 0;
  virtual c10::intrusive_ptr<c10d::Work> allReduceSum(at::Tensor& tensor) = 0;
  virtual c10::intrusive_ptr<c10d::Work> barrier() = 0;
  // The same transport over `size` ranks whose rendezvous is `store`, this one `rank` among them.
  virtual std::unique_ptr<Transport> subgroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) = 0;
  // The threads it started for this rank (their CPU time is the transport's; none: not counted).
  virtual std::vector<pid_t> threads() const { return {}; }
};

// What every transport does the same way on its c10d backend (ProcessGroupGloo's or
// ProcessGroupNCCL's): the reduction and the barrier on the group's backend, and a message as the
// one-tensor list c10d's point-to-point calls take. A transport sets its group once, at
// construction, before any operation.
class GroupTransport : public Transport {
public:
  c10::intrusive_ptr<c10d::Work> allReduceSum(at::Tensor& tensor) override {
    std::vector<at::Tensor> list{tensor};
    return group_->allreduce(list);
  }
  c10::intrusive_ptr<c10d::Work> barrier() override { return group_->barrier(); }

protected:
  void setGroup(c10::intrusive_ptr<c10d::Backend> group) { group_ = std::move(group); }
  // `tensor` sent to rank `dst` of `on`, or received from its rank `src`, under `tag`.
  static c10::intrusive_ptr<c10d::Work> sendOn(c10d::Backend& on, at::Tensor& tensor, int dst, int tag) {
    std::vector<at::Tensor> list{tensor};
    return on.send(list, dst, tag);
  }
  static c10::intrusive_ptr<c10d::Work> recvOn(c10d::Backend& on, at::Tensor& tensor, int src, int tag) {
    std::vector<at::Tensor> list{tensor};
    return on.recv(list, src, tag);
  }
  c10d::Backend& group() const { return *group_; }

private:
  c10::intrusive_ptr<c10d::Backend> group_;
};

// Makes a transport over the world (`env`'s rank and size) whose rendezvous is `store`.
using TransportFactory =
    std::function<std::unique_ptr<Transport>(const c10::intrusive_ptr<c10d::Store>& store, const DistributedEnv& env)>;

// The transport every build has: Gloo's, over TCP through host memory (any device's tensors).
inline constexpr const char* kHostTransport = "gloo";
// Registers a transport under `name` ("nccl"); a wing calls it before main. Returns true.
bool registerTransport(const std::string& name, TransportFactory factory);
// The names registered, kHostTransport first.
std::vector<std::string> transportNames();

} // namespace cleave::runtime::distributed
