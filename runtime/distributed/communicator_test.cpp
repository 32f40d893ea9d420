// Tests of channel matching (communicator.h) on two ranks of Gloo in one process, and of the
// order a pipeline rank posts its receives in (receive_order.h).
#include "runtime/distributed/communicator.h"
#include "runtime/distributed/environment.h"
#include "runtime/distributed/rank_layout.h"
#include "runtime/distributed/receive_buffers.h"
#include "runtime/distributed/receive_order.h"
#include "runtime/distributed/transport.h"
#include "runtime/model/host_backend.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>

namespace cleave::runtime::distributed {
namespace {

std::uint16_t freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

// Rank 0 sends 1.0 (tag 5) then 2.0 (tag 7); rank 1 posts tag 7's receive first, then tag 5's.
// Returns what rank 1's two receives got, or the first error.
Expected<std::pair<double, double>> receiveInTheOtherOrder(ChannelMatching matching, bool checked) {
  const std::uint16_t port = freePort();
  auto rankEnv = [&](int rank) {
    DistributedEnv env;
    env.rank = rank;
    env.worldSize = 2;
    env.localWorldSize = 2;
    env.masterAddr = "127.0.0.1";
    env.masterPort = port;
    env.timeout = std::chrono::seconds(checked ? 3 : 20);
    env.checkChannelOrder = checked;
    return env;
  };
  auto sender = std::async(std::launch::async, [&]() -> Status {
    CLEAVE_TRY(std::unique_ptr<Communicator> comm, Communicator::connect(rankEnv(0)));
    comm->setMatching(matching);
    CLEAVE_CHECK(comm->send(at::full({2}, 1.0), 1, 5));
    CLEAVE_CHECK(comm->send(at::full({2}, 2.0), 1, 7));
    CLEAVE_CHECK(comm->finish());
    return comm->barrier();
  });
  Expected<std::pair<double, double>> got = [&]() -> Expected<std::pair<double, double>> {
    CLEAVE_TRY(std::unique_ptr<Communicator> comm, Communicator::connect(rankEnv(1)));
    comm->setMatching(matching);
    CLEAVE_CHECK(comm->postRecv(0, 7));
    CLEAVE_CHECK(comm->postRecv(0, 5));
    // A failure leaves the sender's messages unread: it fails after its (short) timeout.
    CLEAVE_TRY(at::Tensor seven, comm->recv(0, 7));
    CLEAVE_TRY(at::Tensor five, comm->recv(0, 5));
    CLEAVE_CHECK(comm->barrier());
    return std::pair{seven[0].item<double>(), five[0].item<double>()};
  }();
  Status sent = sender.get();
  if (got && !sent)
    return std::move(sent.error());
  return got;
}

TEST(RankDevice, ARanksGpuIsItsLocalRankAmongTheGpusItSeesAndCpuBackendsStayAsGiven) {
  DistributedEnv env;
  env.localRank = 5;
  EXPECT_EQ(rankGpu(env, 8), 5);
  EXPECT_EQ(rankGpu(env, 2), 1); // CUDA_VISIBLE_DEVICES shows fewer GPUs than the host's ranks
  EXPECT_EQ(rankGpu(env, 0), 0);
  EXPECT_EQ(rankBackend("aten-cpu", &env), "aten-cpu");
  EXPECT_EQ(rankBackend("aten-cuda:1", &env), "aten-cuda:1"); // asked for by number
  EXPECT_EQ(rankBackend("aten-cuda", nullptr), "aten-cuda");  // no launcher
}

TEST(RankDevice, ResolvedOnceTheHostBackendTalksOverTheHostTransportAndAWingsTransportStaysWithItsDevices) {
  Expected<RankDevice> automatic = resolveRankDevice(kHostBackend, "auto", nullptr);
  ASSERT_TRUE(automatic) << automatic.error().message();
  EXPECT_EQ(automatic->backend, kHostBackend);
  EXPECT_EQ(automatic->transport, kHostTransport);
  Expected<RankDevice> named = resolveRankDevice(kHostBackend, kHostTransport, nullptr);
  ASSERT_TRUE(named) << named.error().message();
  EXPECT_EQ(named->transport, kHostTransport);
  // nccl is the CUDA wing's: it moves CUDA tensors only, refused for stages on the CPU before
  // anything loads or connects.
  Expected<RankDevice> foreign = resolveRankDevice(kHostBackend, "nccl", nullptr);
  ASSERT_FALSE(foreign);
  EXPECT_EQ(foreign.error().code(), ErrorCode::Usage);
  EXPECT_EQ(foreign.error().message(),
            "--transport nccl moves CUDA tensors: train the stages on aten-cuda (--backend) or use gloo");
  Expected<RankDevice> unknownTransport = resolveRankDevice(kHostBackend, "mpi", nullptr);
  ASSERT_FALSE(unknownTransport);
  EXPECT_EQ(unknownTransport.error().code(), ErrorCode::InvalidArgument);
  EXPECT_NE(unknownTransport.error().message().find("not in this build (it has gloo"), std::string::npos);
  EXPECT_FALSE(resolveRankDevice("aten-tpu", "auto", nullptr)); // no wing answers to the name
}

TEST(ChannelMatching, ByTagAReceiveMeetsTheSendOfItsTag) {
  auto got = receiveInTheOtherOrder(ChannelMatching::ByTag, false);
  ASSERT_TRUE(got) << got.error().message();
  EXPECT_EQ(*got, (std::pair{2.0, 1.0}));
}

TEST(ChannelMatching, InOrderTheFirstReceivePostedMeetsTheFirstSendAsOnNccl) {
  auto got = receiveInTheOtherOrder(ChannelMatching::InOrder, false);
  ASSERT_TRUE(got) << got.error().message();
  EXPECT_EQ(*got, (std::pair{1.0, 2.0})); // tag 7's receive took tag 5's message
}

TEST(ChannelMatching, CheckedInOrderFailsNamingBothTags) {
  auto got = receiveInTheOtherOrder(ChannelMatching::InOrder, true);
  ASSERT_FALSE(got);
  EXPECT_NE(got.error().message().find("receive from rank 0 (tag 7) met the message of tag 5"), std::string::npos)
      << got.error().message();
}

// Rank 0 runs stages 0 and 2, rank 1 stages 1 and 3 (2 microbatches, GPipe's order): rank 0
// sends its forwards' outputs after each forward and stage 2's input gradient after its backward.
TEST(ReceiveOrder, PostsEachChannelInItsSendersOrderAndOnlyAsFarAsTheLookahead) {
  using pipeline::Action;
  using pipeline::ActionType;
  auto actionsOf = [](int rank) {
    std::vector<Action> actions;
    for (std::uint32_t stage : {std::uint32_t(rank), std::uint32_t(rank + 2)})
      for (std::uint32_t m = 0; m < 2; ++m)
        actions.push_back({stage, ActionType::Forward, m});
    for (std::uint32_t stage : {std::uint32_t(rank + 2), std::uint32_t(rank)})
      for (std::uint32_t m = 0; m < 2; ++m)
        actions.push_back({stage, ActionType::Backward, m});
    return actions;
  };
  auto sendsOf = [](int sender, const Action& a) -> Expected<std::vector<OutgoingMessage>> {
    std::vector<OutgoingMessage> out;
    const std::uint32_t tagBase = 10 * a.stage + a.microbatch;
    if (a.type == ActionType::Forward && a.stage < 3)
      out.push_back({1 - sender, 100 + tagBase, 0, "f", {a.stage + 1, ActionType::Forward, a.microbatch}});
    if (a.type == ActionType::Forward && a.stage == 0) // a skip connection to stage 3
      out.push_back({1, 300 + tagBase, 0, "skip", {3, ActionType::Forward, a.microbatch}});
    if (a.type == ActionType::Backward && a.stage > 0)
      out.push_back({1 - sender, 200 + tagBase, 0, "g", {a.stage - 1, ActionType::Backward, a.microbatch}});
    return out;
  };
  std::vector<Action> own = actionsOf(1); // 1F0 1F1 3F0 3F1 3B0 3B1 1B0 1B1
  Expected<ReceiveOrder> order = ReceiveOrder::plan(1, 2, own, actionsOf, sendsOf);
  ASSERT_TRUE(order) << order.error().message();
  std::vector<std::uint32_t> posted;
  auto post = [&](int peer, std::uint32_t tag, std::uint64_t) -> Status {
    EXPECT_EQ(peer, 0);
    posted.push_back(tag);
    return {};
  };
  // Before 1F0, with one action of lookahead: 1F0's and 1F1's inputs, and 0F0's skip, which rank 0
  // sends between them.
  ASSERT_TRUE(order->postThrough(1, post));
  EXPECT_EQ(posted, (std::vector<std::uint32_t>{100, 300, 101}));
  // 3F0 reads stage 2's output, sent after the second skip.
  ASSERT_TRUE(order->postThrough(2, post));
  EXPECT_EQ(posted, (std::vector<std::uint32_t>{100, 300, 101, 301, 120}));
  ASSERT_TRUE(order->postThrough(7, post));
  EXPECT_EQ(posted, (std::vector<std::uint32_t>{100, 300, 101, 301, 120, 121, 220, 221}));
}

TEST(ReceiveOrder, AMessageNoActionReadsIsAnError) {
  auto actionsOf = [](int) { return std::vector<pipeline::Action>{{0, pipeline::ActionType::Forward, 0}}; };
  auto sendsOf = [](int sender, const pipeline::Action&) -> Expected<std::vector<OutgoingMessage>> {
    return std::vector<OutgoingMessage>{{1 - sender, 1, 0, "x", {5, pipeline::ActionType::Forward, 0}}};
  };
  Expected<ReceiveOrder> order = ReceiveOrder::plan(1, 2, {{1, pipeline::ActionType::Forward, 0}}, actionsOf, sendsOf);
  ASSERT_FALSE(order);
  EXPECT_NE(order.error().message().find("rank 0 sends 'x' for 5F0 after 0F0, which rank 1 does not run"),
            std::string::npos)
      << order.error().message();
}

} // namespace
} // namespace cleave::runtime::distributed

namespace cleave::runtime::distributed {
namespace {

TEST(ReceiveBuffers, ABufferIsReusedOnlyOnceNothingElseHoldsIt) {
  ReceiveBuffers pool;
  const at::Device cpu(at::kCPU);
  at::Tensor first = pool.take(at::kFloat, {4, 8}, cpu);
  EXPECT_EQ(first.sizes(), (at::IntArrayRef{4, 8}));
  EXPECT_TRUE(first.is_contiguous());
  first.fill_(1.0f);
  at::Tensor second = pool.take(at::kFloat, {4, 8}, cpu); // the first is still held: a new one
  EXPECT_NE(second.data_ptr(), first.data_ptr());
  EXPECT_EQ(pool.stats().buffersMade, 2);
  EXPECT_EQ(pool.stats().peakTakenBytes, 256);
  void* firstData = first.data_ptr();
  first = at::Tensor(); // its reader let go
  at::Tensor third = pool.take(at::kLong, {2, 2, 4}, cpu); // 128 bytes again, another dtype
  EXPECT_EQ(third.data_ptr(), firstData);
  EXPECT_EQ(pool.stats().buffersMade, 2);
  // A buffer with more than a quarter to spare is not taken: a new one stands in for it.
  third = at::Tensor();
  at::Tensor small = pool.take(at::kFloat, {8}, cpu);
  EXPECT_EQ(pool.stats().buffersMade, 3);
  EXPECT_EQ(pool.stats().heldBytes, 128 + 32); // the idle 128-byte one was let go for it
  // A step that takes nothing lets the free buffers go.
  small = at::Tensor();
  second = at::Tensor();
  pool.resetPeak(); // both were used in this step: kept
  EXPECT_EQ(pool.stats().heldBytes, 160);
  pool.resetPeak(); // a step without takes: let go
  EXPECT_EQ(pool.stats().heldBytes, 0);
  EXPECT_EQ(pool.stats().peakTakenBytes, 0);
}

} // namespace
} // namespace cleave::runtime::distributed
