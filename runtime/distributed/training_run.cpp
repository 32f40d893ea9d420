#include "runtime/distributed/training_run.h"

#include <ATen/Context.h>

#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <memory>
#include <tuple>

#include "base/file_io.h"
#include "io/model_loader.h"
#include "io/onnx.h"
#include "plan/fixed_batch_check.h"
#include "plan/plan_file.h"
#include "runtime/distributed/pipeline_train.h"
#include "runtime/distributed/rank_layout.h"
#include "runtime/engine/kernel.h"
#include "runtime/model/microbatch.h"
#include "runtime/training/step_loop.h"
#include "runtime/training/throughput.h"

namespace cleave::runtime::distributed {
namespace {

Error usage() { return Error(ErrorCode::Usage); }

// Checkpoint flags that need one another, and folders that would clash, refused before any step.
Status checkCheckpoints(const TrainingRequest& request) {
  const CheckpointSchedule& checkpoints = request.checkpoints;
  if ((checkpoints.every > 0 || checkpoints.stopAfter) && checkpoints.folder().empty())
    return usage() << (checkpoints.stopAfter ? "--stop-after" : "--checkpoint-every")
                   << " needs a folder for checkpoints: --checkpoint-dir D (or --resume D)";
  if (checkpoints.stopAfter && *checkpoints.stopAfter > request.steps)
    return usage() << "--stop-after " << *checkpoints.stopAfter << " is past --steps " << request.steps;
  const std::string& dir = checkpoints.folder();
  if (!dir.empty()) { // a folder, or none yet
    if (Expected<std::optional<std::int64_t>> listed = latestCheckpoint(dir); !listed)
      return std::move(listed.error());
  }
  if (!checkpoints.resumeDir.empty()) {
    CLEAVE_TRY(std::optional<std::int64_t> latest, latestCheckpoint(checkpoints.resumeDir));
    if (!latest)
      return Error(ErrorCode::InvalidArgument) << "--resume " << checkpoints.resumeDir << ": no complete checkpoint there";
  }
  if (!dir.empty() && !request.outputPath.empty() &&
      (isSameOrInside(dir, request.outputPath) || isSameOrInside(request.outputPath, dir)))
    return usage() << "checkpoints (" << dir << ") and -o " << request.outputPath
                   << " must be separate folders: -o replaces its folder whole";
  return {};
}

// Data flags that need another.
Status checkDataFlags(const TrainingRequest& request) {
  if (request.evalData.empty() && !request.evalRows && request.evalEvery > 0)
    return usage() << "--eval-every needs held-out data: --eval-data FILE";
  return {};
}

// Flags for a plan only, or a model only.
Status checkModelKind(const TrainingRequest& request, bool plan) {
  if (plan && (!request.fixedPatterns.frozen.empty() || !request.fixedPatterns.trainable.empty()))
    return usage() << "--frozen and --trainable are for a model; a plan trains what it records: give them "
                      "to cleave pipeline";
  if (plan)
    return {};
  if (!request.wholeModel.empty())
    return usage() << "--model is for plan directories (MODEL is a model already)";
  if (request.pipelineRanks)
    return usage() << "--pipeline-ranks is for plan directories (MODEL is a whole model)";
  if (request.options.recompute == Recompute::Stage)
    return usage() << "--recompute stage is for plan directories: a whole model runs each microbatch's backward "
                      "right after its forward, so there is no stage to recompute (selective is for both)";
  return {};
}

// Microbatches (or a batch) of other rows than the plan's static-batch export fixed run only where
// no constant shape holds that batch: refused here in one line rather than deep inside a step.
Status checkTrainingRows(const TrainingRequest& request, const RankLayout& layout, const plan::PlanFile& planFile) {
  const std::int64_t exported = plan::exportedRows(planFile);
  const std::int64_t rows = layout.replicaRows(request.options.batch), microbatches = request.options.microbatches;
  if (exported < 0 || (microbatches <= 1 && rows == exported))
    return {};
  std::string what = "training --batch " + std::to_string(request.options.batch);
  if (layout.replicas() > 1)
    what += " (" + std::to_string(rows) + " rows per replica)";
  return plan::checkRowsCanChange(request.model, planFile, what + " in " + std::to_string(microbatches) + " microbatch(es)");
}

// The schedule each rank of a pipeline follows (--schedule under launch; none: GPipe order),
// after checking that a replica's rows make the microbatches it is for.
Expected<std::optional<pipeline::Schedule>> pipelineSchedule(const TrainingRequest& request, const RankLayout& layout,
                                                             std::size_t stages) {
  const std::int64_t batch = request.options.batch, microbatches = request.options.microbatches;
  const std::int64_t rows = layout.replicaRows(batch), made = microbatchCount(rows, microbatches);
  if (request.schedule && made != microbatches)
    return usage() << "--schedule " << pipeline::kScheduleKinds.name(*request.schedule) << " needs --batch " << batch
                   << (layout.replicas() > 1 ? " (" + std::to_string(rows) + " rows per replica)" : std::string())
                   << " to split into " << microbatches << " microbatches, and it makes " << made << " (of at most "
                   << (rows + microbatches - 1) / microbatches << " rows, as torch.chunk splits): take --microbatches "
                   << made << " or a batch that splits into " << microbatches;
  std::optional<pipeline::Schedule> schedule;
  if (request.schedule && layout.pipelineRanks > 1) {
    CLEAVE_TRY(schedule, rankSchedule(*request.schedule, stages, microbatches, layout.pipelineRanks));
  }
  return schedule;
}

CheckpointIdentity checkpointIdentity(const TrainingRequest& request, const RankLayout& layout, std::string model,
                                      const TrainingData& data) {
  return {layout.ranks, layout.pipelineRanks, request.options.batch, std::move(model),
          std::string(kOptimizerKinds.name(request.options.optimizer.kind)), request.options.lrSchedule.describe(),
          data.describe()};
}

// What every rank of a plan's run must hold alike (rank_agreement.h): the layout, the schedule and
// its microbatches, the steps, the plan's stages, placement and values between ranks, and the
// options that decide which collectives run and how the parameters move.
RankTerms trainingTerms(const TrainingRequest& request, const RankLayout& layout, const PipelineTrainer& trainer,
                        std::int64_t firstStep, const TrainingData& data) {
  RankTerms terms;
  const TrainOptions& options = request.options;
  terms.add("the rank layout", std::to_string(layout.ranks) + " rank(s) in pipelines of " + std::to_string(layout.pipelineRanks));
  terms.add("the schedule", request.schedule ? std::string(pipeline::kScheduleKinds.name(*request.schedule)) : "gpipe (no --schedule)");
  terms.add("--microbatches", std::to_string(options.microbatches));
  terms.add("--batch", std::to_string(options.batch));
  terms.add("the steps", "from " + std::to_string(firstStep) + " to " + std::to_string(request.checkpoints.lastStep(request.steps)) +
                             " of " + std::to_string(request.steps));
  std::vector<int> stageRanks;
  for (std::size_t s = 0; s < trainer.stages(); ++s)
    stageRanks.push_back(trainer.stageRank(s));
  terms.append(planTerms(trainer.planFile(), stageRanks));
  terms.add("the data", data.describe());
  terms.add("--precision", std::string(kTrainingPrecisions.name(options.precision)));
  terms.add("--recompute", std::string(kRecomputeKinds.name(options.recompute)));
  terms.add("the optimizer", std::string(kOptimizerKinds.name(options.optimizer.kind)) + ", " + options.lrSchedule.describe() +
                                 (options.clipGradNorm ? ", clipped" : ""));
  terms.add("the held-out evaluation", request.evalData.empty() && !request.evalRows
                                           ? "none"
                                           : "every " + std::to_string(request.evalEvery) + " step(s), " +
                                                 std::to_string(request.evalBatches) + " batch(es)");
  terms.add("the checkpoints", request.checkpoints.folder().empty() ? "none" : "every " + std::to_string(request.checkpoints.every) + " step(s)");
  return terms;
}

// The training rows and, when given, the held-out rows: the request's own, or opened from its paths.
struct TrainingSources {
  std::shared_ptr<const TrainingData> data, eval;
};

// The request's token options with --seq-lens' rows grouped: a step's batch, or one microbatch of a
// replica's share (which must split evenly, so that each microbatch is one group).
Expected<std::optional<TokenDataOptions>> groupedTokens(const TrainingRequest& request, int replicas) {
  std::optional<TokenDataOptions> tokens = request.tokens;
  if (!tokens || !tokens->lengths)
    return tokens;
  const std::int64_t batch = request.options.batch, microbatches = request.options.microbatches;
  if (tokens->lengthChange == LengthChange::Step) {
    tokens->lengths->groupRows(batch);
    return tokens;
  }
  if (batch % (replicas * microbatches) != 0)
    return usage() << "--seq-len-per microbatch needs --batch " << batch << " to split into " << replicas * microbatches
                   << " equal microbatches (" << replicas << " replica(s) of " << microbatches << ")";
  tokens->lengths->groupRows(batch / replicas / microbatches);
  return tokens;
}

Expected<std::shared_ptr<const TrainingData>> openSource(std::shared_ptr<const TrainingData> given,
                                                         const std::string& path, const char* flag,
                                                         const std::optional<TokenDataOptions>& tokens,
                                                         const std::vector<std::string>& inputs,
                                                         std::span<const ir::Graph* const> graphs) {
  if (given || path.empty())
    return given;
  Expected<std::unique_ptr<TrainingData>> opened = openTrainingData(path, tokens, inputs, graphs);
  if (!opened)
    return std::move(opened.error().withContext(flag + path));
  return std::shared_ptr<const TrainingData>(std::move(*opened));
}

// `replicas`: how many shares a step's batch is split into (--seq-len-per microbatch's groups).
Expected<TrainingSources> openSources(const TrainingRequest& request, int replicas, const std::vector<std::string>& inputs,
                                      std::span<const ir::Graph* const> graphs) {
  TrainingSources sources;
  CLEAVE_TRY(const std::optional<TokenDataOptions> tokens, groupedTokens(request, replicas));
  CLEAVE_TRY(sources.data, openSource(request.dataRows, request.data, "--data ", tokens, inputs, graphs));
  if (!sources.data)
    return usage() << "no training data: give --data FILE";
  CLEAVE_TRY(sources.eval, openSource(request.evalRows, request.evalData, "--eval-data ", tokens, inputs, graphs));
  return sources;
}

// The step loop of a run on `comm` (every rank calls it alike), its records to the observer.
struct RunLoop {
  const TrainingRequest& request;
  Communicator& comm;
  RankTrainingState state;
  CheckpointIdentity identity;
  const TrainingSources& sources;
  std::optional<double> flopsPerRow;
  StepLoopHooks hooks;
};

Expected<std::int64_t> runLoop(RunLoop& loop, std::int64_t first, TrainingObserver& observer) {
  const TrainingRequest& request = loop.request;
  StepLoopOptions options{first, request.checkpoints.lastStep(request.steps), request.steps, request.options.batch,
                          loop.sources.data->tokensPerRow(), loop.flopsPerRow, request.evalEvery};
  loop.hooks.report = [&](const StepRecord& record) { return observer.stepped(record); };
  if (!request.checkpoints.folder().empty())
    loop.hooks.checkpoint = [&](std::int64_t done) -> Status {
      if (!request.checkpoints.after(done, request.steps))
        return {};
      return saveCheckpoint(request.checkpoints, loop.comm, done, loop.state, loop.identity);
    };
  return runStepLoop(options, loop.hooks);
}

// "rank 3 of 4 (pipeline rank 1 of replica 1): trained submod_1 submod_3".
std::string trainedStages(const RankLayout& layout, const PipelineTrainer& trainer) {
  std::string text = "rank " + std::to_string(layout.rank) + " of " + std::to_string(layout.ranks);
  if (layout.replicas() > 1)
    text += " (pipeline rank " + std::to_string(layout.pipelineRank()) + " of replica " +
            std::to_string(layout.replica()) + ")";
  text += ": trained";
  for (const std::string& stage : trainer.ownStages())
    text += " " + stage;
  return text;
}

// Every source's first row fits the plan's inputs.
Status checkSources(const TrainingRequest& request, const TrainingSources& sources, const PipelineTrainer& trainer) {
  for (const auto& [source, flag, path] : {std::tuple{sources.data.get(), "--data ", &request.data},
                                           {sources.eval.get(), "--eval-data ", &request.evalData}}) {
    if (!source)
      continue;
    Expected<TensorMap> sample = source->rows(0, 1);
    Status fits = sample ? trainer.checkData(*sample) : Status(std::move(sample.error()));
    if (!fits)
      return std::move(fits.error().withContext(path->empty() ? std::string(flag) + "(the request's rows)" : flag + *path));
  }
  return {};
}

// The model the plan was cut from (--model), checked against the plan's stages.
Expected<std::optional<ir::Graph>> wholeModel(const TrainingRequest& request, const PipelineTrainer& trainer) {
  if (request.wholeModel.empty())
    return std::optional<ir::Graph>();
  Expected<ir::Graph> loaded = io::loadModel(request.wholeModel);
  Status fits = loaded ? trainer.checkWholeModel(*loaded) : Status(std::move(loaded.error()));
  if (!fits)
    return std::move(fits.error().withContext("--model " + request.wholeModel));
  return std::optional<ir::Graph>(std::move(*loaded));
}

// A plan directory: its stages on this process (no RANK) or on this rank's share (under launch).
Status trainPlan(const TrainingRequest& request, const RankDevice& device, const std::optional<DistributedEnv>& env,
                 TrainingObserver& observer, std::ostream& notes) {
  // Everything the request names is checked before connecting, so a bad input fails on every
  // rank alike, and no rank waits for another that has already given up.
  CLEAVE_TRY(const RankLayout layout, rankLayout(env, request.pipelineRanks, request.options.batch));
  std::string output; // rank 0 alone writes (a plan directory like the input, its stages trained)
  if (layout.rank == 0 && request.openOutput) {
    CLEAVE_TRY(output, request.openOutput());
  }
  CLEAVE_TRY(std::unique_ptr<Backend> backend, makeBackend(device.backend));
  const pipeline::Placement placement =
      request.schedule ? pipeline::placementOf(*request.schedule) : pipeline::Placement::Loop;
  CLEAVE_TRY(auto trainer, PipelineTrainer::create(request.model, request.options, layout.pipelineRank(),
                                                   layout.pipelineRanks, *backend, placement));
  CLEAVE_CHECK(checkTrainingRows(request, layout, trainer->planFile()));
  CLEAVE_TRY(std::optional<ir::Graph> whole, wholeModel(request, *trainer));
  const std::vector<const ir::Graph*> stageGraphs = trainer->stageGraphs();
  CLEAVE_TRY(TrainingSources sources, openSources(request, layout.replicas(), trainer->graphInputs(), stageGraphs));
  CLEAVE_CHECK(checkSources(request, sources, *trainer));
  CLEAVE_TRY(std::optional<pipeline::Schedule> schedule, pipelineSchedule(request, layout, trainer->stages()));
  std::string stageNames;
  for (std::size_t i = 0; i < trainer->stages(); ++i)
    stageNames += (i ? ", " : "the plan's stages ") + trainer->stageName(i);
  const CheckpointIdentity identity = checkpointIdentity(request, layout, stageNames, *sources.data);
  CLEAVE_TRY(std::int64_t first, resumeStep(request.checkpoints, request.steps, layout.rank, identity,
                                            trainer->trainingState(), notes));
  const RankTerms terms = trainingTerms(request, layout, *trainer, first, *sources.data);
  CLEAVE_TRY(LayoutCommunicators comms, connectLayout(layout, device.transport, env, terms));
  if (env && request.timing)
    notes << "rank " << layout.rank << ": the ranks agreed on " << terms.terms().size() << " terms in "
          << std::fixed << std::setprecision(1) << comms.agreementSeconds * 1e3 << std::defaultfloat << " ms\n";
  CLEAVE_CHECK(trainer->connect(comms.ofPipeline(), comms.replicas.get()));
  const TrainableSet trainable = trainableSet(stageGraphs);
  CLEAVE_CHECK(observer.started({layout.rank, layout.pipelineRanks, first, trainable, *sources.data, sources.eval.get()}));
  RunLoop bound{request, *comms.world, trainer->trainingState(), identity, sources, trainingFlopsPerRow(stageGraphs), {}};
  bound.hooks.step = [&](std::int64_t step) { return trainer->step(*sources.data, step, schedule ? &*schedule : nullptr); };
  if (request.timing)
    bound.hooks.timing = [&]() -> Expected<std::optional<StepTiming>> {
      StepTiming timing;
      CLEAVE_CHECK(trainer->gatherStepTiming(timing));
      return std::optional<StepTiming>(std::move(timing));
    };
  if (sources.eval)
    bound.hooks.evaluate = [&] { return trainer->evaluate(*sources.eval, request.evalBatches); };
  CLEAVE_TRY(std::int64_t skipped, runLoop(bound, first, observer));
  observer.ended({layout.rank, request.checkpoints.lastStep(request.steps) - first, skipped,
                  trainedStages(layout, *trainer)});
  // Every rank of the first replica takes part (the others send their stages to rank 0); the
  // replicas' parameters are equal, so the first's are written.
  if (request.outputPath.empty() || layout.replica() != 0)
    return {};
  return trainer->writeTrained(request.model, output, whole ? &*whole : nullptr);
}

// A model, in this process.
Status trainModel(const TrainingRequest& request, const RankDevice& device, TrainingObserver& observer,
                  std::ostream& notes) {
  std::string staging;
  if (request.openOutput) {
    CLEAVE_TRY(staging, request.openOutput());
  }
  CLEAVE_TRY(ir::Graph loaded, io::loadModel(request.model, {.fixedPatterns = request.fixedPatterns,
                                                             .expandFunctions = opsWithoutKernels()}));
  auto graph = std::make_shared<const ir::Graph>(std::move(loaded));
  const ir::Graph* modelGraph = graph.get();
  CLEAVE_TRY(TrainingSources sources, openSources(request, 1, ir::graphInputNames(*graph), {&modelGraph, 1}));
  CLEAVE_TRY(std::unique_ptr<Backend> backend, makeBackend(device.backend));
  CLEAVE_TRY(std::unique_ptr<Trainer> trainer, Trainer::create(graph, request.options, *backend));
  std::unique_ptr<Communicator> comm = Communicator::local();
  RunLoop loop{request, *comm, trainer->trainingState(),
               checkpointIdentity(request, RankLayout{}, "the whole model", *sources.data), sources,
               trainingFlopsPerRow({&modelGraph, 1}), {}};
  CLEAVE_TRY(std::int64_t first, resumeStep(request.checkpoints, request.steps, 0, loop.identity,
                                            trainer->trainingState(), notes));
  const TrainableSet trainable = trainableSet({&modelGraph, 1});
  CLEAVE_CHECK(observer.started({0, 1, first, trainable, *sources.data, sources.eval.get()}));
  loop.hooks.step = [&](std::int64_t step) { return trainer->step(*sources.data, step); };
  if (sources.eval)
    loop.hooks.evaluate = [&] { return trainer->evaluate(*sources.eval, request.evalBatches); };
  CLEAVE_TRY(std::int64_t skipped, runLoop(loop, first, observer));
  observer.ended({0, request.checkpoints.lastStep(request.steps) - first, skipped, std::string()});
  if (staging.empty())
    return {};
  CLEAVE_TRY(ir::Graph trained, trainer->trainedGraph());
  return io::writeOnnx(trained, (std::filesystem::path(staging) / "trained.onnx").string());
}

} // namespace

Status runTraining(TrainingRequest request, TrainingObserver& observer, std::ostream& notes) {
  request.options.lrSchedule.steps = request.steps;
  CLEAVE_CHECK(checkCheckpoints(request));
  CLEAVE_CHECK(checkDataFlags(request));
  const bool plan = plan::isPlanDirectory(request.model);
  CLEAVE_CHECK(checkModelKind(request, plan));
  // A plan's ranks under launch read their place; a model trains in this process alone.
  std::optional<DistributedEnv> env;
  if (plan && std::getenv("RANK")) {
    CLEAVE_TRY(env, readDistributedEnv());
  }
  // Before any call into ATen's device hooks (manual_seed seeds every GPU): the backend's wing
  // loads first.
  CLEAVE_TRY(const RankDevice device, resolveRankDevice(request.backend, request.transport, env ? &*env : nullptr));
  at::manual_seed(request.options.seed);
  return plan ? trainPlan(request, device, env, observer, notes) : trainModel(request, device, observer, notes);
}

} // namespace cleave::runtime::distributed
