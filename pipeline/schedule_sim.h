// pipeline/schedule_sim.h - checking and timing a schedule.
//
// validateSchedule: every action names a stage of its rank and a microbatch in range; every
// (stage, microbatch) has one forward and either one full backward or one I and one W; then the
// ranks are played: each runs its next action once its dependencies are met (a forward after
// the previous stage's forward, a backward after its own forward and the next stage's backward,
// W after I; with explicit communication, a receive after the matching send, and a forward or
// backward after its receive). No rank able to move while actions remain is a deadlock, reported
// with every rank's blocked action. How a transport completes sends is an option:
//   Buffered     a send never blocks its rank (cleave's Gloo runner posts sends and waits for them
//                only at the end of the step; messages are matched by tag)
//   Rendezvous   a send completes only once its receive is posted, and its rank waits for that
//                before its next action (a blocking send on Gloo or NCCL)
// and with `orderedChannels` (NCCL: no tags, the k-th send from rank a to rank b meets b's k-th
// receive from a) each channel's sends and receives must name the same messages in the same
// order; the first that differ is reported.
//
// simulateSchedule plays it in time: an action starts when its rank is free and its inputs have
// arrived (a cross-rank dependency adds the transfer latency), and lasts its stage's cost. A
// message to another rank can also cost its sender time (`sendCost`: a transport that writes the
// socket on the caller's thread, as Gloo's TCP one does): the sending rank is occupied that long
// after the action that produced the message (or for its SEND action), and the message leaves
// after it. That time is not compute. Receiving can cost the receiver time too (`receiveCost`:
// a transport whose own thread reads the socket, which on a rank whose cores are all computing
// comes out of the rank's time): the receiving rank is occupied that long before the action that
// consumes the message (or for its RECV action). Not compute either. Particular actions can be given their own duration
// (`actionCosts`, a replay of a measured run whose actions' times vary), which replaces their
// stage's cost for them alone. With `costSpread`, each F, B, I and W lasts its cost times a random
// factor (lognormal, median 1, that coefficient of variation), and simulateWithSpread averages
// plays over seeds: actions whose times vary lengthen a schedule (a rank waits for its slowest
// input), which one cost per stage leaves out. It reports the makespan, the bubble fraction
// (1 - compute time / (ranks x makespan)) and each rank's
// With `pairCost`, a forward followed by another stage's full backward plays as one block (F&B).
// Peak activation memory (microbatches forwarded and not yet fully backwarded, in bytes of what
// their forwards hold under the recomputation modelled: see Recompute), plus the timeline.
// Complexity: O(A + P x R) for A actions and P passes over the R ranks (P <= A); the channel
// order check O(A log A).
#pragma once

#include <optional>

#include "pipeline/receive_buffer_model.h"
#include "pipeline/schedule.h"

namespace cleave::pipeline {

enum class SendSemantics : std::uint8_t { Buffered, Rendezvous };

struct ValidationOptions {
  SendSemantics sends = SendSemantics::Buffered;
  bool orderedChannels = false;
};

Status validateSchedule(const Schedule& schedule, const ValidationOptions& options = {});

struct StageCosts {
  double forward = 1.0, backward = 2.0;      // a full backward (B)
  double backwardInput = 1.0, backwardWeight = 1.0; // I and W
  std::int64_t activationBytes = 1;           // what F holds until B (or W)
  std::int64_t inputBytes = 0;                // the stage's inputs: what F holds with Recompute::Stage
  // Selective recomputation: the part of activationBytes its segments drop after F and make
  // again in B (or I), and the time that replay adds to B (or I).
  std::int64_t droppedBytes = 0;
  double replay = 0.0;
  // Held only while a backward (B, I or W) runs, above what it recomputes: autograd's
  // temporaries and the gradients it hands on.
  std::int64_t backwardBytes = 0;
  // The stage's parameters' gradients: made by its first B (or W) and kept to the step's end.
  std::int64_t gradientBytes = 0;
};

// What F holds until its backward, and what B (or I) makes again first (cleave train --recompute):
//   None       F holds activationBytes;
//   Stage      F holds inputBytes; B (or I) first runs the forward again (its cost adds the
//              stage's forward) and holds activationBytes from then until B (or W) ends;
//   Selective  F holds activationBytes - droppedBytes; B (or I) first replays the dropped part
//              (its cost adds `replay`) and holds droppedBytes until B (or W) ends.
// Under each, a B, I or W also holds backwardBytes while it runs, and a stage's first B (or W)
// makes gradientBytes that stay. cleave train --timing measures these per stage
// (docs/pipeline.md): activationBytes, backwardBytes and gradientBytes are the stage_forward_bytes,
// stage_backward_bytes and stage_gradient_bytes of a run without recomputation, inputBytes the
// stage_forward_bytes of one with stage recomputation, and activationBytes - droppedBytes that of
// one with selective recomputation; the peak predicted is then its rank_peak_step_bytes.
// (A selective segment that also reads a parameter is replayed by both I and W in cleave's run;
// the model charges the replay to I only.)
enum class Recompute : std::uint8_t { None, Stage, Selective };
inline constexpr auto kRecomputeKinds = enumTable<Recompute>(
    {{Recompute::None, "none"}, {Recompute::Stage, "stage"}, {Recompute::Selective, "selective"}});

struct SimulationOptions {
  std::vector<StageCosts> stages; // one per stage, or one for all (empty: defaults)
  double transferLatency = 0.0;   // per cross-rank dependency
  double sendCost = 0.0;          // the sending rank's own time per cross-rank message
  double receiveCost = 0.0;       // the receiving rank's own time per cross-rank message
  // Durations of single actions (F, B, I or W of a stage and microbatch), each in place of its
  // stage's cost; an action named twice takes the last.
  std::vector<std::pair<Action, double>> actionCosts;
  // > 0: each F, B, I or W (its stage's cost or its own) times a lognormal factor with median 1
  // and this coefficient of variation, drawn per action from `spreadSeed` by a counter-based
  // generator (the same seed gives the same factors whatever the order of play).
  double costSpread = 0.0;
  std::uint64_t spreadSeed = 1;
  Recompute recompute = Recompute::None; // activation recomputation (above)
  // > 0: DualPipe's F&B. A rank's forward directly followed by a full backward of another stage
  // plays as one block of this length (a forward and a backward overlapped, so each hides the
  // other's communication): it starts once both have their inputs, and both finish at its end.
  double pairCost = 0.0;
  // The plan's messages between stages (receive_buffer_model.h): with them, each rank's peak of
  // receive-buffer bytes is counted, posting `receiveLookahead` compute actions ahead.
  std::vector<StageEdge> messages;
  std::uint32_t receiveLookahead = 2; // nccl_streams.h's kReceiveLookahead, cleave train's
};

// simulateWithSpread's plays: their number, mean makespan and bubble, and the bubble's range.
struct SpreadSummary {
  std::uint32_t samples = 0;
  double meanMakespan = 0.0, meanBubble = 0.0, minBubble = 0.0, maxBubble = 0.0;
};

struct TimedAction {
  std::uint32_t rank = 0;
  Action action;
  double start = 0.0, end = 0.0;
};

struct SimulationResult {
  double makespan = 0.0;
  double bubbleFraction = 0.0;
  std::vector<double> busy;                   // compute time per rank (not sends)
  std::vector<std::int64_t> peakActivationBytes; // per rank
  std::vector<std::int64_t> peakReceiveBytes;    // per rank, with options.messages (else empty)
  std::vector<TimedAction> timeline;          // in execution order
  std::optional<SpreadSummary> spread;        // simulateWithSpread only
};

// Fails like validateSchedule (a schedule that deadlocks cannot be timed), for an action cost
// outside the schedule's stages and microbatches, of a SEND/RECV, or negative or not finite, and
// for a cost spread that is negative or not finite.
Expected<SimulationResult> simulateSchedule(const Schedule& schedule, const SimulationOptions& options = {});
// The schedule played `samples` (>= 1) times with options.costSpread and seeds 1..samples: the
// first play's result, with `spread` summarizing all of them. O(samples x simulateSchedule).
Expected<SimulationResult> simulateWithSpread(const Schedule& schedule, SimulationOptions options,
                                              std::uint32_t samples);

} // namespace cleave::pipeline
