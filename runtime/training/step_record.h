// runtime/training/step_record.h - what a training step reports, as typed records a caller (the CLI,
// a test, a Python binding) reads without libtorch: the step's result, its rate, its held-out loss
// and, for a plan, where its time went. report/training_report.h renders them.
// Guarantees: torch-free (only the standard library and pipeline/schedule.h), so the rendering in
// report/ builds in cleave_core (CMakeLists.txt lists this header as one the core may include).
// Complexity: plain data.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pipeline/schedule.h"

namespace cleave::runtime {

// What a step did: the batch's mean loss, the learning rate it stepped with, and (clipping) the
// gradients' global L2 norm before clipping (what torch.nn.utils.clip_grad_norm_ returns).
// `skipped`: the step's loss or gradients were not finite and NonFinitePolicy::Skip dropped it.
struct StepResult {
  double loss = 0.0, lr = 0.0;
  std::optional<double> gradNorm;
  bool skipped = false;
};

struct StepRate {
  double seconds = 0.0, rowsPerSecond = 0.0, tokensPerSecond = 0.0; // tokens: 0 for tensor rows
  std::optional<double> flopsPerSecond;
  double etaSeconds = 0.0; // the run's remaining steps at the mean step time so far
};

// Where a step's time went: its wall time on this rank (from reading its rows to the loss's
// all-reduce), the part of it until the schedule's last action and its sends were done (before
// tied gradients' all-reduce and the optimizer step), and, per stage, the seconds its forwards
// and its backwards computed (summed over microbatches; waiting for a receive is not counted).
// A backward split into I and W (zero bubble) counts both; weightSeconds is W's part. Per rank:
// its schedule's wall seconds and the part of them it waited in receives (the rest is compute
// and the work between actions: gradient sums, sends, freeing activations), the messages it
// received, and the CPU seconds its transport's own threads ran meanwhile (communicator.h: not
// in the rank's wall time, but taken from the same cores).
struct StepTiming {
  double stepSeconds = 0.0, scheduleSeconds = 0.0;
  std::vector<double> forwardSeconds, backwardSeconds, weightSeconds; // per stage
  std::vector<double> rankScheduleSeconds, rankWaitSeconds;           // per rank
  std::vector<double> rankReceives, rankTransportSeconds;             // per rank
  // Per rank: the most bytes ATen's CPU allocator held during the step above what it held at
  // the step's start (activations, autograd's buffers, gradients, messages: what --recompute
  // shrinks), from runtime/engine/host_memory.h's counters; 0 where its allocator is not installed.
  std::vector<double> rankPeakStepBytes;
  // Per rank: the most bytes its receive buffers held taken at once in the step (what `cleave
  // schedule --simulate --message-bytes` predicts), and all its buffers, taken or free, at the end
  // (runtime/distributed/receive_buffers.h: reused across microbatches and steps).
  std::vector<double> rankReceiveBufferPeakBytes, rankReceiveBufferHeldBytes;
  // Per stage, the most over its microbatches, from the same counters (0 without them): what one
  // forward left allocated (held until its backward: activations and autograd's saved tensors, or
  // under --recompute stage its inputs; with what it received, allocated when the receive was
  // posted, before it began), how far a backward (B, I or W) rose above what was allocated when it began (its
  // recomputation and autograd's temporaries), and the parameters' gradients its first B (or W)
  // made, which stay to the step's end (not in that rise). The inputs of `cleave schedule
  // --simulate`'s memory model.
  std::vector<double> stageForwardBytes, stageBackwardBytes, stageGradientBytes;
  // Per rank, data parallel: the seconds it waited after its schedule for the sums of its stages'
  // gradients across the replicas (started as each stage's backward ended: the part the
  // schedule's remaining work did not hide).
  std::vector<double> rankReplicaWaitSeconds;
  double headersSent = 0.0; // shape headers sent in the step (communicator.h; gathered: all ranks')
  // The measured timeline: per (stage, microbatch, action type F / B / I / W), at
  // actionSlot(...) * kSlotFields: start, end and the receive wait inside it, in seconds from the
  // step's start on the rank that ran it, that rank, and the compute seconds inside it (what the
  // stage's forward / backward seconds gained; the rest of end - start - wait is the
  // action's bookkeeping); zeros for an action not run. Comparable with the simulator's.
  std::vector<double> actionSeconds;
  static constexpr std::size_t kSlotFields = 5;   // start, end, wait, rank, compute
  static constexpr std::size_t kComputeTypes = 4; // F, B, I, W: ActionType's first four
  // A stage's compute seconds so far: forward plus backward (which includes W's).
  double computeSeconds(std::size_t stage) const { return forwardSeconds[stage] + backwardSeconds[stage]; }
  static std::size_t actionSlot(std::size_t stage, std::size_t microbatch, std::size_t microbatches,
                                pipeline::ActionType type) {
    return (stage * microbatches + microbatch) * kComputeTypes + static_cast<std::size_t>(type);
  }
};

// One step as a run reports it: its number (from 0), what it did, how fast, the held-out loss
// after it (--eval-every), and, for a plan under --timing, the gathered timing of every rank.
struct StepRecord {
  std::int64_t step = 0;
  StepResult result;
  StepRate rate;
  std::optional<double> evalLoss;
  std::optional<StepTiming> planTiming;
};

} // namespace cleave::runtime
