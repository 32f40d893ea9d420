// runtime/cpu/gloo_transport.cpp - the host transport (runtime/distributed/transport.h,
// kHostTransport): c10d's Gloo process group over TCP, through host memory, registered by the CPU
// wing before main as the NCCL transport is by the CUDA wing (runtime/cuda/nccl_transport.cpp).
// It carries CPU tensors, matched by tag; every build has it.
// Complexity: per message O(1) besides its bytes; one listening device per group.
#include "runtime/distributed/environment.h"
#include "runtime/distributed/transport.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "base/resources.h"

namespace cleave::runtime::cpu {
namespace {
using distributed::DistributedEnv;
using distributed::GroupTransport;
using distributed::kHostTransport;
using distributed::Transport;

// This host's address on the route toward `host`: the source address the kernel picks for a
// datagram socket connected there (connecting one sends nothing). Empty when `host` does not
// resolve or has no route. Why: the address a peer can reach this rank at is the one on the
// interface facing the master, not whatever the hostname resolves to (often 127.0.1.1, or an
// address of another network namespace), which is what Gloo's default device binds.
std::string localAddressToward(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0)
    return {};
  std::string address;
  for (addrinfo* a = found; a && address.empty(); a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0)
      continue;
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    char text[INET6_ADDRSTRLEN] = {};
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      if (local.ss_family == AF_INET)
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, text, sizeof text);
      else if (local.ss_family == AF_INET6 && !IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr))
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, text, sizeof text);
      address = text;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return address;
}

// Where this rank's Gloo transport listens: GLOO_SOCKET_IFNAME's interface when set (as in
// PyTorch); else this host's address on the route toward the master (loopback when the master
// is on this host's loopback); else Gloo's default (the hostname's address).
std::shared_ptr<::gloo::transport::Device> transportDevice(const DistributedEnv& env) {
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME"); interface && *interface)
    return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  if (std::string address = localAddressToward(env.masterAddr, env.masterPort); !address.empty())
    return c10d::ProcessGroupGloo::createDeviceForHostname(address);
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
// Gloo over TCP: CPU tensors, matched by tag; its threads are told apart when it starts.
class GlooTransport final : public GroupTransport {
public:
  GlooTransport(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const DistributedEnv& env) : env_(env) {
    auto options = c10d::ProcessGroupGloo::Options::create(env.timeout);
    // The transport's threads: those the device (its I/O loop) and the group (its workers) start.
    const std::vector<pid_t> before = threadIds();
    options->devices.push_back(transportDevice(env));
    setGroup(c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options));
    threads_ = threadsStartedSince(before);
  }
  std::string name() const override { return kHostTransport; }
  bool tagged() const override { return true; }
  at::Device device() const override { return at::kCPU; }
  c10::intrusive_ptr<c10d::Work> send(at::Tensor& tensor, int dst, int tag) override {
    return sendOn(group(), tensor, dst, tag);
  }
  c10::intrusive_ptr<c10d::Work> recv(at::Tensor& tensor, int src, int tag) override {
    return recvOn(group(), tensor, src, tag);
  }
  std::unique_ptr<Transport> subgroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) override {
    return std::make_unique<GlooTransport>(store, rank, size, env_);
  }
  std::vector<pid_t> threads() const override { return threads_; }

private:
  DistributedEnv env_;
  std::vector<pid_t> threads_;
};

[[maybe_unused]] const bool registered = distributed::registerTransport(
    kHostTransport, [](const c10::intrusive_ptr<c10d::Store>& store, const DistributedEnv& env) -> std::unique_ptr<Transport> {
      return std::make_unique<GlooTransport>(store, env.rank, env.worldSize, env);
    });

} // namespace
} // namespace cleave::runtime::cpu
