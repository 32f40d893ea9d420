// bench/bench_comm.cpp - what cleave's send/recv (runtime/distributed/communicator.h: a header
// message with dtype and dims, then the data) costs against Gloo's own round trip of the same
// bytes into a buffer the receiver already holds. Run under `cleave launch --nproc 2`:
//
//   cleave launch --nproc 2 -- build/release/bench_comm [--rows R] [--cols C] [--iters N] [--rounds K]
//
// Both ranks ping-pong one [R, C] float32 tensor (a pipeline boundary of one microbatch) N times
// per round through cleave's Communicator (a known shape key: the data alone; and key 0: a header
// every time) and raw ProcessGroupGloo send/recv, in one round each, the order flipped every
// round; rank 0 prints each side's median round trip over the rounds, the per-round ratio cleave
// / Gloo with [min, max], and cleave's overhead per one-way message. The raw group rendezvous on
// MASTER_PORT + 1.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/distributed/communicator.h"
#include "runtime/distributed/environment.h"

namespace {
using cleave::runtime::distributed::Communicator;
using cleave::runtime::distributed::DistributedEnv;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Seconds per round trip of `tensor` between ranks 0 and 1 through cleave's Communicator; with
// `shapeKey` 0 every message carries its header, else only the key's first. `sendCalls`, when
// given, gets the seconds each send() call held this rank's thread (its receive is posted by
// then, as a pipeline posts its receives ahead, so Gloo writes the message inside the call).
double cleaveRoundTrip(Communicator& comm, const at::Tensor& tensor, int iters, std::uint64_t shapeKey,
                       std::vector<double>* sendCalls = nullptr) {
  auto timedSend = [&](const at::Tensor& t, int dst, std::uint32_t tag) {
    auto called = Clock::now();
    bool sent = static_cast<bool>(comm.send(t, dst, tag, shapeKey));
    if (sendCalls)
      sendCalls->push_back(std::chrono::duration<double>(Clock::now() - called).count());
    return sent;
  };
  auto start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    std::uint32_t tag = static_cast<std::uint32_t>(i % 1000);
    if (comm.rank() == 0) {
      if (!timedSend(tensor, 1, tag) || !comm.recv(1, tag, shapeKey))
        std::exit(1);
    } else {
      auto got = comm.recv(0, tag, shapeKey);
      if (!got || !timedSend(*got, 0, tag))
        std::exit(1);
    }
    if (!comm.finish())
      std::exit(1);
  }
  return std::chrono::duration<double>(Clock::now() - start).count() / iters;
}

// The same through ProcessGroupGloo, the receiver's buffer allocated once.
double glooRoundTrip(c10d::ProcessGroupGloo& group, int rank, const at::Tensor& tensor, int iters) {
  at::Tensor buffer = at::empty_like(tensor);
  std::vector<at::Tensor> out{tensor}, in{buffer};
  auto start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    if (rank == 0) {
      group.send(out, 1, 0)->wait();
      group.recv(in, 1, 0)->wait();
    } else {
      group.recv(in, 0, 0)->wait();
      group.send(in, 0, 0)->wait();
    }
  }
  return std::chrono::duration<double>(Clock::now() - start).count() / iters;
}

std::int64_t option(int argc, char** argv, const std::string& name, std::int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name)
      return std::atoll(argv[i + 1]);
  return fallback;
}
} // namespace

int main(int argc, char** argv) {
  const std::int64_t rows = option(argc, argv, "--rows", 8), cols = option(argc, argv, "--cols", 1024);
  const int iters = static_cast<int>(option(argc, argv, "--iters", 2000));
  const int rounds = static_cast<int>(option(argc, argv, "--rounds", 5));
  auto env = cleave::runtime::distributed::readDistributedEnv();
  if (!env || env->worldSize != 2) {
    std::fprintf(stderr, "bench_comm: run under `cleave launch --nproc 2` (%s)\n",
                 env ? "WORLD_SIZE is not 2" : env.error().message().c_str());
    return 2;
  }
  auto comm = Communicator::connect(*env);
  if (!comm) {
    std::fprintf(stderr, "bench_comm: %s\n", comm.error().message().c_str());
    return 1;
  }
  c10d::TCPStoreOptions storeOptions;
  storeOptions.port = static_cast<std::uint16_t>(env->masterPort + 1);
  storeOptions.isServer = env->rank == 0;
  storeOptions.numWorkers = 2;
  auto store = c10::make_intrusive<c10d::TCPStore>(env->masterAddr, storeOptions);
  auto groupOptions = c10d::ProcessGroupGloo::Options::create();
  groupOptions->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  c10d::ProcessGroupGloo raw(store, env->rank, 2, groupOptions);

  at::Tensor tensor = at::randn({rows, cols});
  cleaveRoundTrip(**comm, tensor, iters / 10 + 1, 0); // warm-up, all sides
  cleaveRoundTrip(**comm, tensor, iters / 10 + 1, 1);
  glooRoundTrip(raw, env->rank, tensor, iters / 10 + 1);
  std::vector<double> ours, headed, gloo, ratios, headedRatios, sendCalls;
  for (int round = 0; round < rounds; ++round) {
    double a = 0, h = 0, b = 0;
    if (round % 2 == 0) {
      a = cleaveRoundTrip(**comm, tensor, iters, 1, &sendCalls);
      h = cleaveRoundTrip(**comm, tensor, iters, 0);
      b = glooRoundTrip(raw, env->rank, tensor, iters);
    } else {
      b = glooRoundTrip(raw, env->rank, tensor, iters);
      h = cleaveRoundTrip(**comm, tensor, iters, 0);
      a = cleaveRoundTrip(**comm, tensor, iters, 1, &sendCalls);
    }
    ours.push_back(a);
    headed.push_back(h);
    gloo.push_back(b);
    ratios.push_back(a / b);
    headedRatios.push_back(h / b);
  }
  if (env->rank == 0) {
    double oursMedian = median(ours), glooMedian = median(gloo);
    std::printf("tensor f32[%lld,%lld] (%lld bytes), %d round trips x %d rounds (interleaved)\n",
                static_cast<long long>(rows), static_cast<long long>(cols), static_cast<long long>(rows * cols * 4),
                iters, rounds);
    std::printf("gloo send/recv round trip  median %.2f us\n", glooMedian * 1e6);
    std::printf("cleave send/recv round trip median %.2f us (a known shape: one message each way)\n", oursMedian * 1e6);
    std::printf("ratio cleave/gloo median %.2fx [%.2f, %.2f]; overhead per one-way message %.2f us\n",
                median(ratios), *std::min_element(ratios.begin(), ratios.end()),
                *std::max_element(ratios.begin(), ratios.end()), (oursMedian - glooMedian) / 2 * 1e6);
    std::printf("cleave send() call median %.2f us of the sender's thread (a known shape, receive posted)\n",
                median(sendCalls) * 1e6);
    std::printf("with a header every message: round trip median %.2f us, ratio %.2fx [%.2f, %.2f]\n",
                median(headed) * 1e6, median(headedRatios), *std::min_element(headedRatios.begin(), headedRatios.end()),
                *std::max_element(headedRatios.begin(), headedRatios.end()));
  }
  return 0;
}
