// pipeline/schedule.h - pipeline schedules as data: per rank, the ordered actions it performs.
//
// Action notation (PyTorch's pipelining schedules): STAGE TYPE MICROBATCH, e.g. "1F0" (stage 1,
// forward, microbatch 0), "0B3" (full backward), "2I1" / "0W3" (backward for the input / for
// the weights: the two halves of a backward in zero-bubble schedules), "2SEND_B2", "1RECV_F1".
// Placement (stageRank): stage s runs on rank s % ranks (loop placement; with one stage per rank,
// stage = rank), except under the V schedules, whose stages go down the ranks and back up (with
// 2R stages rank r holds stages r and 2R - 1 - r: the first and the last stage share rank 0).
//
// Generators (compute actions only; withCommunication adds the sends and receives):
//   gpipe          all forwards, then all backwards               1 stage per rank
//   1f1b           warm-up forwards, then one forward one backward 1 stage per rank
//   interleaved    Megatron's interleaved 1F1B over v stages per rank (microbatches a multiple
//                  of the ranks)
//   looped_bfs     each local stage's forwards for every microbatch, breadth first, backwards in
//                  reverse
//   zero_bubble    backward split into I and W; list scheduling that runs I before F before W,
//                  with 1F1B's in-flight limit, so the W's fill what would be bubbles (ZB-H1
//                  style), 1 stage per rank
//   zbv            the zero-bubble paper's ZB-V: 2 stages per rank in a V, backward split into I
//                  and W; with F = I = W each rank idles only the pipeline's fill (R - 1 forwards)
//                  and holds at most 2R stage activations (1F1B's memory: its stages are twice
//                  as large); microbatches >= 2 x ranks
//   dualpipev      DeepSeek's DualPipeV (DualPipe cut in half): 2 stages per rank in a V; after
//                  the warm-up a forward of one stage is paired with the full backward of the
//                  other (F&B, which overlaps them where computation and communication can);
//                  the last backwards split into I and W; bubble (R - 1)(F&B + B - 3W) with B a
//                  full backward, microbatches >= 2 x ranks
// CSV: one line per rank, its actions separated by commas (an empty cell is an idle step).
// Complexity: a generator makes O(stages x microbatches) actions in time linear in them; CSV
// reading and writing are linear in the text.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/enum_table.h"
#include "base/expected.h"

namespace cleave::pipeline {

enum class ActionType : std::uint8_t { Forward, Backward, BackwardInput, BackwardWeight, SendF, RecvF, SendB, RecvB };
inline constexpr int kActionTypes = 8;
// F, B, I or W: an action that computes (the rest move messages).
inline constexpr bool isCompute(ActionType type) {
  return type == ActionType::Forward || type == ActionType::Backward || type == ActionType::BackwardInput ||
         type == ActionType::BackwardWeight;
}

struct Action {
  std::uint32_t stage = 0;
  ActionType type = ActionType::Forward;
  std::uint32_t microbatch = 0;
  friend bool operator==(const Action&, const Action&) = default;
};

std::string formatAction(const Action& action);
Expected<Action> parseAction(std::string_view text);

enum class ScheduleKind : std::uint8_t { GPipe, OneFOneB, Interleaved1F1B, LoopedBFS, ZeroBubble, ZeroBubbleV, DualPipeV };
inline constexpr auto kScheduleKinds = enumTable<ScheduleKind>({{ScheduleKind::GPipe, "gpipe"},
                                                               {ScheduleKind::OneFOneB, "1f1b"},
                                                               {ScheduleKind::Interleaved1F1B, "interleaved"},
                                                               {ScheduleKind::Interleaved1F1B, "interleaved_1f1b"},
                                                               {ScheduleKind::LoopedBFS, "looped_bfs"},
                                                               {ScheduleKind::ZeroBubble, "zero_bubble"},
                                                               {ScheduleKind::ZeroBubbleV, "zbv"},
                                                               {ScheduleKind::DualPipeV, "dualpipev"}});

// How stages map to ranks. Loop: stage s on rank s % R. V: chunk c = s / R of the stages runs down
// the ranks when c is even and back up when odd (rank s % R, or R - 1 - s % R), so that with 2R
// stages the forward turns around on the last rank and the loss stage sits on rank 0 with the first.
enum class Placement : std::uint8_t { Loop, V };

// The rank that runs stage (or submodule) `stage` of a run on `ranks` ranks. The one
// stage-to-rank rule: schedules, the distributed runner and the pipeline trainer all use it.
constexpr int stageRank(std::size_t stage, int ranks, Placement placement = Placement::Loop) {
  const std::size_t r = static_cast<std::size_t>(ranks), position = stage % r;
  const bool upward = placement == Placement::V && (stage / r) % 2 == 1;
  return static_cast<int>(upward ? r - 1 - position : position);
}

// The placement a schedule kind runs its stages in (V for zbv and dualpipev, else Loop).
constexpr Placement placementOf(ScheduleKind kind) {
  return kind == ScheduleKind::ZeroBubbleV || kind == ScheduleKind::DualPipeV ? Placement::V : Placement::Loop;
}

struct Schedule {
  std::uint32_t stages = 0, ranks = 0, microbatches = 0;
  Placement placement = Placement::Loop;
  std::vector<std::vector<Action>> perRank; // ranks entries
  std::uint32_t rankOf(std::uint32_t stage) const {
    return static_cast<std::uint32_t>(stageRank(stage, static_cast<int>(ranks), placement));
  }
  bool hasCommunication() const;
};

// Limits on a schedule's size, so that generating, validating or simulating one stays within memory
// and time (a schedule holds O(stages x microbatches) actions): checked by generateSchedule and
// parseCsv.
inline constexpr std::uint32_t kMaxScheduleStages = 1024, kMaxScheduleRanks = 1024;
inline constexpr std::uint32_t kMaxScheduleMicrobatches = 65536;
inline constexpr std::uint64_t kMaxScheduleStageMicrobatches = std::uint64_t{1} << 20; // stages x microbatches

// Fails: InvalidArgument (sizes over the limits above, zero stages/ranks/microbatches, stages not a multiple of ranks, more
// than one stage per rank for gpipe/1f1b/zero_bubble, interleaved microbatches not a multiple of
// the ranks, zbv / dualpipev without exactly 2 stages per rank or with fewer than 2 x ranks
// microbatches).
Expected<Schedule> generateSchedule(ScheduleKind kind, std::uint32_t stages, std::uint32_t microbatches,
                                    std::uint32_t ranks);

// Adds SEND_F after each forward whose next stage is on another rank and RECV_F before that
// stage's forward; SEND_B / RECV_B likewise for backwards (B or I).
Schedule withCommunication(const Schedule& schedule);

// What one rank of the distributed runners computes, in order: its part of `schedule` when given
// (compute actions only: sends and receives follow from them), else GPipe's order over the stages
// it holds (loop placement, any number of stages): its forwards microbatch by microbatch
// in stage order, then its backwards microbatch by microbatch in reverse stage order. Without
// `backward` (inference), forwards only. O(stages x microbatches).
std::vector<Action> rankComputeActions(const Schedule* schedule, std::uint32_t stages, std::uint32_t microbatches,
                                       std::uint32_t ranks, std::uint32_t rank, bool backward);

std::string formatCsv(const Schedule& schedule);
// Stages and microbatches are inferred (the largest index + 1) unless given (non-zero); the
// placement is the one the actions' ranks follow (V when they fit it and not loop placement;
// else loop, under which validateSchedule names an action on the wrong rank).
Expected<Schedule> parseCsv(std::string_view text, std::uint32_t stages = 0, std::uint32_t microbatches = 0);

} // namespace cleave::pipeline
