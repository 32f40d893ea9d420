// runtime/cuda/nccl_transport.cpp - the NCCL transport (runtime/distributed/transport.h), built
// with the CUDA wing (where libtorch has CUDA and c10d's NCCL backend), registered as "nccl".
//
// Each channel (sender, receiver) runs on a two-rank NCCL communicator of its own, so on a CUDA
// stream of its own: a receive posted ahead waits only for its own channel's earlier messages,
// and a compute action only for the receives it reads (pipeline/nccl_streams.h: ChannelStreams,
// which progresses whenever the schedule does with buffered sends). ProcessGroupNCCL makes a
// communicator at its first operation, so a channel costs nothing until a message uses it.
// Reductions and the barrier run on the group's own communicator. Rank r's tensors live on GPU
// LOCAL_RANK (modulo the GPUs it sees); NCCL refuses two ranks on one GPU.
// Complexity: per message O(1) besides its bytes; one communicator per channel used.
#include "runtime/distributed/environment.h"
#include "runtime/distributed/transport.h"

#include <c10/cuda/CUDAFunctions.h>
#include <nccl.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <map>
#include <stdexcept>

namespace cleave::runtime::cuda {

namespace {
using distributed::DistributedEnv;
using distributed::GroupTransport;
using distributed::Transport;

class NcclTransport final : public GroupTransport {
public:
  NcclTransport(c10::intrusive_ptr<c10d::Store> store, int rank, int size, at::Device device)
      : store_(std::move(store)), rank_(rank), device_(device) {
    c10::cuda::set_device(device.index());
    setGroup(c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, rank, size, c10d::ProcessGroupNCCL::Options::create()));
  }

  std::string name() const override { return "nccl"; }
  bool tagged() const override { return false; }
  at::Device device() const override { return device_; }

  // On the channel's communicator the sender is rank 0 and the receiver rank 1.
  c10::intrusive_ptr<c10d::Work> send(at::Tensor& tensor, int dst, int tag) override {
    return sendOn(*channel(rank_, dst), tensor, 1, tag);
  }
  c10::intrusive_ptr<c10d::Work> recv(at::Tensor& tensor, int src, int tag) override {
    return recvOn(*channel(src, rank_), tensor, 0, tag);
  }
  std::unique_ptr<Transport> subgroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) override {
    return std::make_unique<NcclTransport>(store, rank, size, device_);
  }

private:
  const c10::intrusive_ptr<c10d::ProcessGroupNCCL>& channel(int sender, int receiver) {
    auto [slot, fresh] = channels_.try_emplace({sender, receiver});
    if (fresh) {
      const std::string prefix = "cleave/nccl/channel/" + std::to_string(sender) + "-" + std::to_string(receiver) + "/";
      auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
      slot->second = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, sender == rank_ ? 0 : 1, 2,
                                                                 c10d::ProcessGroupNCCL::Options::create());
    }
    return slot->second;
  }

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_ = 0;
  at::Device device_;
  std::map<std::pair<int, int>, c10::intrusive_ptr<c10d::ProcessGroupNCCL>> channels_; // (sender, receiver)
};

// The NCCL this process runs is the one the wing was compiled against, which is the one
// libtorch_cuda's communicators use (the wing links the same libnccl.so.2): two NCCLs in one
// process would not share their state, and their versions may disagree on the wire.
void checkOneNccl() {
  int loaded = 0;
  if (ncclGetVersion(&loaded) != ncclSuccess || loaded != NCCL_VERSION_CODE)
    throw std::runtime_error("NCCL " + std::to_string(loaded) + " is loaded, but the CUDA wing was built with NCCL " +
                             std::to_string(NCCL_VERSION_CODE) + " (rebuild against this libtorch's NCCL)");
}

// GPU LOCAL_RANK of those this process sees (CUDA_VISIBLE_DEVICES), wrapping around.
at::Device rankDevice(const DistributedEnv& env) {
  const int count = static_cast<int>(c10::cuda::device_count());
  if (count == 0)
    throw std::runtime_error("the nccl transport needs a CUDA device, and this process sees none");
  return {at::kCUDA, static_cast<c10::DeviceIndex>(rankGpu(env, count))};
}

[[maybe_unused]] const bool registered = distributed::registerTransport(
    "nccl", [](const c10::intrusive_ptr<c10d::Store>& store, const DistributedEnv& env) -> std::unique_ptr<Transport> {
      checkOneNccl();
      return std::make_unique<NcclTransport>(store, env.rank, env.worldSize, rankDevice(env));
    });

} // namespace

} // namespace cleave::runtime::cuda
