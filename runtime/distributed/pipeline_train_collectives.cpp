// runtime/distributed/pipeline_train_collectives.cpp - the collectives of a pipeline step: tied parameters' gradients summed and their copies
// made equal, replicas' gradient sums, and the loss and global gradient norm every rank agrees on
// (pipeline_train_state.h).
#include "runtime/distributed/pipeline_train_state.h"

namespace cleave::runtime::distributed {

Status PipelineTrainer::State::startReplicaSum(int stage) {
  std::vector<at::Tensor> params;
  for (auto& entry : stages[stage].executor->trainableParameters())
    params.push_back(entry.second);
  return replicaGradients.start(*replicas, params);
}

Status PipelineTrainer::State::finishReplicaSums() {
  if (!replicas)
    return {};
  auto started = std::chrono::steady_clock::now();
  CLEAVE_CHECK(replicas->finish());
  timing.rankReplicaWaitSeconds[static_cast<std::size_t>(rank)] = secondsSince(started);
  replicaGradients.writeBack();
  return {};
}

std::vector<std::vector<int>> PipelineTrainer::State::gradientsDoneAfter(
    const std::vector<pipeline::Action>& actions) const {
  std::vector<std::vector<int>> done(actions.size());
  std::vector<bool> seen(stages.size(), false);
  for (std::size_t k = actions.size(); k-- > 0;) { // the last one per stage, from the end
    const pipeline::Action& action = actions[k];
    const bool completes = action.type == pipeline::ActionType::Backward ||
                           action.type == pipeline::ActionType::BackwardWeight;
    if (completes && !seen[action.stage]) {
      seen[action.stage] = true;
      done[k].push_back(static_cast<int>(action.stage));
    }
  }
  for (int i = 0; i < static_cast<int>(stages.size()) && !actions.empty(); ++i)
    if (own(i) && !seen[static_cast<std::size_t>(i)]) // no backward here: its zeros are summed all the same
      done.back().push_back(i);
  return done;
}

Status PipelineTrainer::State::reduceTiedGradients() {
  for (const auto& [name, shape] : tied) {
    CLEAVE_TRY(at::ScalarType type, scalarTypeOf(shape.first));
    auto copies = ownCopies.find(name);
    at::Tensor sum = at::zeros(shape.second, at::TensorOptions().dtype(type).device(tiedDevice(copies)));
    if (copies != ownCopies.end())
      for (const at::Tensor& copy : copies->second)
        if (copy.grad().defined())
          sum += copy.grad();
    if (Status reduced = comm->allReduceSum(sum); !reduced)
      return std::move(reduced.error().withContext("step " + std::to_string(stepIndex + 1) + "'s sum of the tied '" +
                                                   name + "' gradients"));
    if (copies != ownCopies.end())
      for (const at::Tensor& copy : copies->second)
        copy.mutable_grad() = sum.clone();
  }
  return {};
}

// Every copy of a tied parameter starts from the first holding stage's value (they are equal in a
// plan cut from one model; this makes it so for any plan). One all-reduce per tied parameter, in
// the same (name) order on every rank; holders other than the first contribute zeros.
Status PipelineTrainer::State::broadcastTiedParameters() {
  c10::NoGradGuard noGrad;
  for (const auto& [name, shape] : tied) {
    CLEAVE_TRY(at::ScalarType type, scalarTypeOf(shape.first));
    auto copies = ownCopies.find(name);
    at::Tensor value = at::zeros(shape.second, at::TensorOptions().dtype(type).device(tiedDevice(copies)));
    if (own(firstHolder.at(name)))
      value.copy_(copies->second.front());
    CLEAVE_CHECK(comm->allReduceSum(value));
    if (copies != ownCopies.end())
      for (const at::Tensor& copy : copies->second)
        copy.copy_(value);
  }
  return {};
}

Expected<double> PipelineTrainer::State::reduceLossAndGradientNorm(double lossSum, double& loss) {
  // One all-reduce: each stage's squared gradient norm, then the loss (the replicas' losses after).
  at::Tensor perStage = at::zeros({static_cast<std::int64_t>(stages.size()) + 1}, at::kDouble);
  perStage[static_cast<std::int64_t>(stages.size())] = lossSum;
  for (int i = 0; i < static_cast<int>(stages.size()); ++i) {
    if (!own(i))
      continue;
    std::vector<at::Tensor> counted;
    for (auto& [name, tensor] : stages[i].executor->trainableParameters())
      if (!tied.count(name) || firstHolder.at(name) == i)
        counted.push_back(tensor);
    perStage[i] = squaredGradientNorm(counted);
  }
  if (Status reduced = comm->allReduceSum(perStage); !reduced) // after the schedule: say which step's
    return std::move(reduced.error().withContext("step " + std::to_string(stepIndex + 1) +
                                                 "'s loss and gradient norm, after its schedule"));
  double sum = 0.0;
  const double* squares = perStage.data_ptr<double>();
  at::Tensor replicaLoss = at::full({1}, squares[stages.size()], at::kDouble);
  if (replicas)
    CLEAVE_CHECK(replicas->allReduceSum(replicaLoss));
  loss = replicaLoss.item<double>();
  for (std::size_t i = 0; i < stages.size(); ++i)
    sum += squares[i];
  return std::sqrt(sum);
}

} // namespace cleave::runtime::distributed
