#include "runtime/distributed/rank_run.h"

#include <chrono>

#include "plan/fixed_batch_check.h"
#include "runtime/distributed/distributed_run.h"
#include "runtime/distributed/environment.h"
#include "runtime/distributed/rank_agreement.h"
#include "runtime/distributed/rank_layout.h"
#include "runtime/distributed/transport.h"
#include "runtime/model/run_harness.h"
#include "runtime/model/tensor_files.h"
#include "runtime/model/host_backend.h"

namespace cleave::runtime::distributed {
namespace {

Expected<TensorMap> rankInputs(const RankRunRequest& request, const CutModel& model) {
  if (!request.inputsPath.empty())
    return readTensors(request.inputsPath, model.graphInputs());
  return model.randomInputs(request.seed, request.dims);
}

// What every rank of a distributed run must hold alike: the plan (submodule i on rank i % ranks),
// the order and microbatches, and the inputs' dtypes and dims.
RankTerms runTerms(const RankRunRequest& request, const CutModel& model, const TensorMap& inputs, int worldSize) {
  RankTerms terms;
  terms.add("the schedule", request.schedule ? std::string(pipeline::kScheduleKinds.name(*request.schedule)) : "gpipe (no --schedule)");
  terms.add("--microbatches", std::to_string(request.microbatches));
  std::vector<int> stageRanks;
  for (std::size_t s = 0; s < model.size(); ++s)
    stageRanks.push_back(static_cast<int>(s % static_cast<std::size_t>(worldSize)));
  terms.append(planTerms(model.plan().file(), stageRanks));
  for (const auto& [name, tensor] : inputs)
    terms.add("the input '" + name + "'", c10::toString(tensor.scalar_type()) + c10::str(tensor.sizes()));
  return terms;
}

} // namespace

Expected<RankRunResult> runRank(const RankRunRequest& request) {
  CLEAVE_TRY(DistributedEnv env, readDistributedEnv());
  if (request.schedule && pipeline::placementOf(*request.schedule) != pipeline::Placement::Loop)
    return Error(ErrorCode::Usage) << "--schedule " << pipeline::kScheduleKinds.name(*request.schedule)
                                   << " is a training schedule (two stages per rank in a V, for the backward's sake); "
                                      "a forward runs under gpipe, 1f1b, interleaved or looped_bfs";
  // Each rank on its own GPU, by the rule training follows (the wing loaded before ATen is asked);
  // a forward talks over the host transport.
  CLEAVE_TRY(const RankDevice device, resolveRankDevice(request.backend, kHostTransport, &env));
  CLEAVE_TRY(auto acc, makeBackend(device.backend, request.optimizations));
  CLEAVE_TRY(auto cpu, makeBackend(kHostBackend, request.optimizations));
  CLEAVE_TRY(CutModel model, loadRankModel(request.plan, env.rank, env.worldSize, *acc, *cpu));
  // A static-batch export whose constants hold the batch would fail deep inside the first run.
  CLEAVE_CHECK(plan::checkMicrobatchesCanRun(request.plan, model.plan().file(), request.microbatches));
  CLEAVE_TRY(TensorMap inputs, rankInputs(request, model));
  std::optional<pipeline::Schedule> schedule;
  if (request.schedule) {
    CLEAVE_TRY(schedule, rankSchedule(*request.schedule, model.size(), request.microbatches, env.worldSize));
  }
  const PlanShapes shapes(model.plan().file().values);
  CLEAVE_TRY(auto comm, Communicator::connect(env));
  CLEAVE_CHECK(agreeBeforeStart(*comm, runTerms(request, model, inputs, env.worldSize)));
  const std::size_t headersBefore = comm->headersSent();
  const auto start = std::chrono::steady_clock::now();
  CLEAVE_TRY(DistributedRunResult ran, runDistributed(model, inputs, request.microbatches, *comm,
                                                      schedule ? &*schedule : nullptr, &shapes));
  RankRunResult result;
  RankRun& run = result.run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.shapeHeaders = static_cast<std::int64_t>(comm->headersSent() - headersBefore);
  run.rank = env.rank;
  run.ranks = env.worldSize;
  run.microbatches = request.microbatches;
  run.ownSteps = std::move(ran.ownSteps);
  run.outputs = summarizeOutputs(ran.outputs);
  result.outputs = std::move(ran.outputs);
  result.outputNames = model.graphOutputs();
  return result;
}

} // namespace cleave::runtime::distributed
