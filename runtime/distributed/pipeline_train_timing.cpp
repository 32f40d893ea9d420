// runtime/distributed/pipeline_train_timing.cpp - a pipeline step's timing and memory: each action's start, end, wait and compute seconds,
// the bytes a forward holds and a backward rises by, gathered across ranks for --timing
// (pipeline_train_state.h).
#include "runtime/distributed/pipeline_train_state.h"

namespace cleave::runtime::distributed {

void PipelineTrainer::State::resetTiming(std::size_t microbatches) {
  for (std::vector<double>* perStage : {&timing.forwardSeconds, &timing.backwardSeconds, &timing.weightSeconds,
                                        &timing.stageForwardBytes, &timing.stageBackwardBytes, &timing.stageGradientBytes})
    perStage->assign(stages.size(), 0.0);
  for (std::vector<double>* perRank : {&timing.rankScheduleSeconds, &timing.rankWaitSeconds, &timing.rankReceives,
                                       &timing.rankTransportSeconds, &timing.rankPeakStepBytes,
                                       &timing.rankReplicaWaitSeconds, &timing.rankReceiveBufferPeakBytes,
                                       &timing.rankReceiveBufferHeldBytes})
    perRank->assign(static_cast<std::size_t>(worldSize), 0.0);
  timing.actionSeconds.assign(StepTiming::kSlotFields * StepTiming::kComputeTypes * stages.size() * microbatches, 0.0);
}

std::int64_t PipelineTrainer::State::beginActionMemory() {
  const HostMemoryStats now = hostMemoryStats();
  stepPeakBytes = std::max(stepPeakBytes, now.peakBytesInUse); // the step's peak outlives the action's
  resetHostMemoryPeak();
  actionReceivedBytes = 0;
  return now.bytesInUse;
}

void PipelineTrainer::State::recordActionMemory(const pipeline::Action& action, std::int64_t bytesBefore) {
  using pipeline::ActionType;
  const HostMemoryStats now = hostMemoryStats();
  const std::size_t stage = action.stage;
  // What it received counts as its own: allocated when the receive was posted, before it began.
  const std::int64_t received = actionReceivedBytes;
  if (action.type == ActionType::Forward) {
    timing.stageForwardBytes[stage] =
        std::max(timing.stageForwardBytes[stage], static_cast<double>(now.bytesInUse - bytesBefore + received));
    return;
  }
  double rise = static_cast<double>(now.peakBytesInUse - bytesBefore + received); // B, I or W
  if ((action.type == ActionType::Backward || action.type == ActionType::BackwardWeight) &&
      !timing.stageGradientBytes[stage]) { // the first to make the parameters' gradients, which stay
    double bytes = 0.0;
    for (const auto& [name, parameter] : stages[stage].executor->trainableParameters())
      bytes += static_cast<double>(parameter.numel() * static_cast<std::int64_t>(parameter.element_size()));
    timing.stageGradientBytes[stage] = bytes;
    rise = std::max(rise - bytes, 0.0);
  }
  timing.stageBackwardBytes[stage] = std::max(timing.stageBackwardBytes[stage], rise);
}

Status PipelineTrainer::gatherStepTiming(StepTiming& timing) const {
  const StepTiming& own = state_->timing; // other ranks' slots are zeros here: a sum gathers them
  const std::vector<double> headers{own.headersSent};
  const std::vector<double>* parts[] = {&own.forwardSeconds,      &own.backwardSeconds, &own.weightSeconds,
                                        &own.rankScheduleSeconds, &own.rankWaitSeconds, &own.rankReceives,
                                        &own.rankTransportSeconds, &headers,              &own.actionSeconds,
                                        &own.rankPeakStepBytes,   &own.rankReplicaWaitSeconds,
                                        &own.stageForwardBytes,   &own.stageBackwardBytes,  &own.stageGradientBytes,
                                        &own.rankReceiveBufferPeakBytes, &own.rankReceiveBufferHeldBytes};
  std::vector<std::int64_t> offsets{0};
  for (const std::vector<double>* part : parts)
    offsets.push_back(offsets.back() + static_cast<std::int64_t>(part->size()));
  at::Tensor all = at::zeros({offsets.back()}, at::kDouble);
  double* c = all.data_ptr<double>();
  for (std::size_t p = 0; p < std::size(parts); ++p)
    std::copy(parts[p]->begin(), parts[p]->end(), c + offsets[p]);
  CLEAVE_CHECK(state_->comm->allReduceSum(all));
  timing.stepSeconds = own.stepSeconds;
  timing.scheduleSeconds = own.scheduleSeconds;
  std::vector<double> headersSent;
  std::vector<double>* into[] = {&timing.forwardSeconds,      &timing.backwardSeconds, &timing.weightSeconds,
                                 &timing.rankScheduleSeconds, &timing.rankWaitSeconds, &timing.rankReceives,
                                 &timing.rankTransportSeconds, &headersSent,           &timing.actionSeconds,
                                 &timing.rankPeakStepBytes,   &timing.rankReplicaWaitSeconds,
                                 &timing.stageForwardBytes,   &timing.stageBackwardBytes,  &timing.stageGradientBytes,
                                 &timing.rankReceiveBufferPeakBytes, &timing.rankReceiveBufferHeldBytes};
  for (std::size_t p = 0; p < std::size(parts); ++p)
    into[p]->assign(c + offsets[p], c + offsets[p + 1]);
  timing.headersSent = headersSent[0];
  return {};
}

} // namespace cleave::runtime::distributed
