// Tests of pipeline/nccl_streams.h: every generated schedule, microbatches below the stages
// included, progresses on NCCL as cleave issues it (one stream per channel); PyTorch's way (one
// stream per rank pair, receives posted ahead) hangs some of them, and the reason names the batches.
#include "pipeline/nccl_streams.h"

#include <gtest/gtest.h>

#include "pipeline/schedule_sim.h"

namespace cleave::pipeline {
namespace {

struct Shape {
  ScheduleKind kind;
  std::uint32_t stages, microbatches, ranks;
};

std::string describe(const Shape& shape) {
  return std::string(kScheduleKinds.name(shape.kind)) + " " + std::to_string(shape.stages) + " stages, " +
         std::to_string(shape.microbatches) + " microbatches, " + std::to_string(shape.ranks) + " ranks";
}

// Every schedule the generators accept for up to 4 ranks, 2 stages per rank and 9 microbatches.
std::vector<std::pair<Shape, Schedule>> generatedSchedules() {
  std::vector<std::pair<Shape, Schedule>> all;
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved1F1B,
                            ScheduleKind::LoopedBFS, ScheduleKind::ZeroBubble, ScheduleKind::ZeroBubbleV,
                            ScheduleKind::DualPipeV})
    for (std::uint32_t ranks = 1; ranks <= 4; ++ranks)
      for (std::uint32_t perRank = 1; perRank <= 2; ++perRank)
        for (std::uint32_t microbatches = 1; microbatches <= 9; ++microbatches) {
          Shape shape{kind, ranks * perRank, microbatches, ranks};
          if (Expected<Schedule> s = generateSchedule(kind, shape.stages, microbatches, ranks))
            all.push_back({shape, std::move(*s)});
        }
  return all;
}

TEST(NcclStreams, EveryGeneratedScheduleProgressesOnCleavesChannelStreams) {
  std::size_t fewerMicrobatchesThanStages = 0;
  const auto all = generatedSchedules();
  ASSERT_EQ(all.size(), 256u);
  for (const auto& [shape, schedule] : all) {
    ASSERT_TRUE(validateSchedule(schedule)) << describe(shape);
    for (std::uint32_t lookahead : {0u, 1u, 2u, 16u}) {
      Status nccl = checkNccl(schedule, NcclIssue::ChannelStreams, lookahead);
      EXPECT_TRUE(nccl) << describe(shape) << ", lookahead " << lookahead << ": " << nccl.error().message();
    }
    fewerMicrobatchesThanStages += shape.microbatches < shape.stages;
  }
  EXPECT_EQ(fewerMicrobatchesThanStages, 44u); // torchtitan's hang: microbatches < stages
}

TEST(NcclStreams, OneStreamPerRankPairHangs1F1BWhenReceivesArePostedAhead) {
  Schedule oneF = *generateSchedule(ScheduleKind::OneFOneB, 2, 4, 2);
  EXPECT_TRUE(checkNccl(oneF, NcclIssue::PairStreams, 0));
  Status ahead = checkNccl(oneF, NcclIssue::PairStreams, 1);
  ASSERT_FALSE(ahead);
  // Rank 0's stream waits in a batch for 0B0 behind which its send of 1F1 sits; rank 1's waits
  // for 1F1 ahead of its send of 0B0.
  EXPECT_NE(ahead.error().message().find("on NCCL (one stream per rank pair, receives 1 actions ahead) the schedule hangs"),
            std::string::npos)
      << ahead.error().message();
  EXPECT_NE(ahead.error().message().find("receive 0B0"), std::string::npos) << ahead.error().message();
  EXPECT_NE(ahead.error().message().find("receive 1F1"), std::string::npos) << ahead.error().message();
  EXPECT_TRUE(checkNccl(oneF, NcclIssue::ChannelStreams, 1));
}

TEST(NcclStreams, OneStreamPerRankPairHangsInterleaved1F1BEvenWithoutLookahead) {
  // Two stages per rank: both directions of the pair's messages share one stream, and a batch's
  // send waits behind the other rank's, each for the other.
  Schedule interleaved = *generateSchedule(ScheduleKind::Interleaved1F1B, 4, 4, 2);
  Status pair = checkNccl(interleaved, NcclIssue::PairStreams, 0);
  ASSERT_FALSE(pair);
  EXPECT_NE(pair.error().message().find("rank 0 before 2B1, its stream with rank 1 in the batch issued after 2B0 "
                                        "[send 1B0]; rank 1 before 1F2"),
            std::string::npos)
      << pair.error().message();
  EXPECT_TRUE(checkNccl(interleaved, NcclIssue::ChannelStreams, 2));
  // ZB-V sends a forward and a backward on one channel in an order its receiver does not consume them in.
  Status v = checkNccl(*generateSchedule(ScheduleKind::ZeroBubbleV, 4, 4, 2), NcclIssue::PairStreams, 0);
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message().find("channel rank 0 -> rank 1: message 2 is sent as 1F2 but received as 2B0"),
            std::string::npos)
      << v.error().message();
}

TEST(NcclStreams, ReceivesInTheConsumersOrderMismatchAnUntaggedChannel) {
  // Rank 1 runs microbatch 1 first: by tag that is fine, but on a channel without tags its first
  // receive would take 1F0's data. Posting in the sender's order (channel streams) is right.
  Expected<Schedule> swapped = parseCsv("0F0,0F1,0B0,0B1\n1F1,1F0,1B0,1B1\n");
  ASSERT_TRUE(swapped);
  ASSERT_TRUE(validateSchedule(*swapped));
  Status pair = checkNccl(*swapped, NcclIssue::PairStreams, 0);
  ASSERT_FALSE(pair);
  EXPECT_NE(pair.error().message().find("channel rank 0 -> rank 1: message 0 is sent as 1F0 but received as 1F1"),
            std::string::npos)
      << pair.error().message();
  EXPECT_TRUE(checkNccl(*swapped, NcclIssue::ChannelStreams, 0));
  EXPECT_EQ(channelOrders(*swapped)[1][0], (std::vector<StageMessage>{{false, 1, 0}, {false, 1, 1}}));
}

TEST(NcclStreams, AScheduleThatDeadlocksWithBufferedSendsIsRefusedFirst) {
  Expected<Schedule> stuck = parseCsv("0F0,0B0\n1B0,1F0\n");
  ASSERT_TRUE(stuck);
  Status nccl = checkNccl(*stuck, NcclIssue::ChannelStreams, 2);
  ASSERT_FALSE(nccl);
  EXPECT_NE(nccl.error().message().find("deadlocks"), std::string::npos) << nccl.error().message();
}

TEST(NcclStreams, MessagesOfAnAction) {
  Schedule v = *generateSchedule(ScheduleKind::ZeroBubbleV, 4, 4, 2); // rank 0: stages 0 and 3
  auto sends = actionSends(v, 0, {0, ActionType::Forward, 2});
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].peer, 1u);
  EXPECT_EQ(formatStageMessage(sends[0].message), "1F2");
  EXPECT_TRUE(actionSends(v, 0, {0, ActionType::BackwardInput, 2}).empty()); // stage 0 sends no gradient
  auto receives = actionReceives(v, 0, {3, ActionType::BackwardInput, 1});
  EXPECT_TRUE(receives.empty()); // the last stage's backward starts from the loss
  receives = actionReceives(v, 0, {3, ActionType::Forward, 1});
  ASSERT_EQ(receives.size(), 1u);
  EXPECT_EQ(receives[0].peer, 1u);
  EXPECT_EQ(formatStageMessage(receives[0].message), "3F1");
}

} // namespace
} // namespace cleave::pipeline
