// runtime/distributed/pipeline_train.cpp - PipelineTrainer's public face (pipeline_train.h): loading
// the plan's stages, connecting, checks, a step and a held-out evaluation in the schedule's order,
// the training state a checkpoint saves, and writing what trained (pipeline_train_state.h names
// the files that do the rest).
#include "runtime/distributed/pipeline_train_state.h"

namespace cleave::runtime::distributed {

Status PipelineTrainer::State::loadPlan(const std::string& dir, pipeline::Placement placement) {
  CLEAVE_TRY(plan, LoadedPlan::load(dir, worldSize, placement));
  const plan::PlanFile& planFile = plan->file();
  std::map<std::string, int> holders;
  for (const PlacedSubmodule& sub : plan->submodules()) {
    const int index = static_cast<int>(stages.size());
    Stage stage;
    stage.name = sub.name;
    stage.file = sub.file;
    stage.rank = sub.rank;
    stage.inputs = sub.inputs;
    stage.outputs = sub.outputs;
    stage.graph = sub.graph;
    CLEAVE_TRY(stage.backend, backends->of(sub));
    for (auto& [name, shape] : trainedShapes(*stage.graph)) {
      if (++holders[name] == 2)
        tied[name] = shape;
      firstHolder.emplace(name, index);
    }
    stages.push_back(std::move(stage));
  }
  planShapes.emplace(planFile.values);
  // The loss: the output named --loss, else 'loss', else the only scalar output (as for a model).
  std::vector<std::string> scalars;
  for (const plan::PlanFileInput& output : planFile.outputs) {
    if (options.loss.empty() ? output.value == "loss" : output.value == options.loss)
      loss = output.value;
    for (const plan::PlanFileValue& value : planFile.values)
      if (value.name == output.value && value.kind == "tensor" && value.rankKnown && value.shape.empty())
        scalars.push_back(value.name);
  }
  if (loss.empty() && options.loss.empty() && scalars.size() == 1)
    loss = scalars[0];
  if (loss.empty())
    return Error(ErrorCode::InvalidArgument) << dir << ": no plan output named '"
                                             << (options.loss.empty() ? "loss" : options.loss)
                                             << "'" << (options.loss.empty() ? " and " + std::to_string(scalars.size()) + " scalar outputs" : "")
                                             << " (export the model with its loss; name it with --loss)";
  lossStage = producerOf(loss);
  return {};
}

Expected<std::vector<TensorMap>> PipelineTrainer::State::replicaMicrobatches(const TrainingData& data,
                                                                            std::int64_t stepIndex) const {
  if (options.batch % replicaCount != 0)
    return Error(ErrorCode::InvalidArgument) << "--batch " << options.batch << " does not split into " << replicaCount
                                             << " equal replica shares";
  const std::int64_t share = options.batch / replicaCount;
  return data.microbatches(stepIndex * options.batch + replica * share, share, options.microbatches);
}

PipelineTrainer::~PipelineTrainer() = default;

Expected<std::unique_ptr<PipelineTrainer>> PipelineTrainer::create(const std::string& planDir,
                                                                  const TrainOptions& options, int rank, int worldSize,
                                                                  const Backend& backend, pipeline::Placement placement) {
  std::unique_ptr<PipelineTrainer> trainer(new PipelineTrainer());
  trainer->state_ = std::make_unique<State>();
  State& s = *trainer->state_;
  s.rank = rank;
  s.worldSize = worldSize;
  s.options = options;
  s.backends = std::make_unique<PlanBackends>(backend, backend, Optimizations{});
  CLEAVE_CHECK(s.loadPlan(planDir, placement));
  CLEAVE_CHECK(checkTrainableAsExported(trainer->stageGraphs()));
  std::vector<at::Tensor> params;
  for (int i = 0; i < static_cast<int>(s.stages.size()); ++i) {
    if (!s.own(i))
      continue;
    Expected<std::unique_ptr<Executor>> executor = s.stages[i].backend->lowerTrainable(s.stages[i].graph);
    if (!executor)
      return std::move(executor.error().withContext("stage '" + s.stages[i].name + "'"));
    s.stages[i].executor = std::move(*executor);
    s.stages[i].executor->setSelectiveRecompute(options.recompute == Recompute::Selective);
    for (auto& [name, tensor] : s.stages[i].executor->trainableParameters()) {
      params.push_back(tensor);
      s.optimized.emplace_back(s.stages[i].name + "/" + name, tensor);
      if (s.tied.count(name))
        s.ownCopies[name].push_back(tensor);
    }
  }
  if (params.empty()) { // a rank without parameters still takes part; its optimizer has nothing to do
    params.push_back(at::zeros({1}).requires_grad_(true));
    s.optimized.emplace_back(kNoParameters, params.back());
  }
  s.optimizer = makeOptimizer(std::move(params), options.optimizer);
  return trainer;
}

Status PipelineTrainer::connect(Communicator& comm, Communicator* replicas) {
  State& s = *state_;
  if (comm.rank() != s.rank || comm.worldSize() != s.worldSize)
    return Error(ErrorCode::InvalidArgument) << "the communicator is rank " << comm.rank() << " of " << comm.worldSize()
                                             << ", the trainer rank " << s.rank << " of " << s.worldSize;
  s.comm = &comm;
  comm.setMatching(ChannelMatching::InOrder); // NCCL's rule, held on every transport (communicator.h)
  if (replicas && replicas->worldSize() > 1) {
    if (s.options.batch % replicas->worldSize() != 0)
      return Error(ErrorCode::InvalidArgument) << "--batch " << s.options.batch << " does not split into "
                                               << replicas->worldSize() << " equal replica shares";
    s.replicas = replicas;
    s.replica = replicas->rank();
    s.replicaCount = replicas->worldSize();
  }
  return s.broadcastTiedParameters();
}

Status PipelineTrainer::checkData(const TensorMap& data) const {
  for (const std::string& name : state_->plan->graphInputs())
    if (auto tensor = data.find(name); tensor != data.end())
      CLEAVE_CHECK(state_->planShapes->checkRows(name, tensor->second));
  return {};
}

Status PipelineTrainer::checkWholeModel(const ir::Graph& whole) const {
  std::map<std::string, std::pair<ir::DType, std::vector<std::int64_t>>> planShapes;
  std::set<std::string> heldFixed; // by the plan (--frozen given to cleave pipeline, a folded value)
  for (const Stage& stage : state_->stages) {
    planShapes.merge(trainedShapes(*stage.graph)); // tied copies agree (checked at create)
    for (std::uint32_t p = 0; p < stage.graph->numParameters(); ++p)
      if (stage.graph->parameter(ir::ParamId{p}).isBuffer())
        heldFixed.insert(stage.graph->parameter(ir::ParamId{p}).name);
  }
  auto wholeShapes = trainedShapes(whole);
  std::erase_if(wholeShapes, [&](const auto& entry) { return heldFixed.count(entry.first) > 0; });
  auto formatDims = [](const std::vector<std::int64_t>& dims) {
    return ir::formatShape(ir::ValueType::tensor(ir::DType::F32, dims).shape);
  };
  for (const auto& [name, shape] : wholeShapes) {
    auto found = planShapes.find(name);
    if (found == planShapes.end())
      return Error(ErrorCode::InvalidArgument) << "its parameter '" << name << "' is in no stage of the plan";
    if (found->second != shape)
      return Error(ErrorCode::InvalidArgument) << "its parameter '" << name << "' is " << ir::dtypeName(shape.first)
                                               << formatDims(shape.second) << ", the plan's "
                                               << ir::dtypeName(found->second.first) << formatDims(found->second.second);
  }
  for (const auto& entry : planShapes)
    if (!wholeShapes.count(entry.first))
      return Error(ErrorCode::InvalidArgument) << "the plan's parameter '" << entry.first << "' is not in it";
  return {};
}

Status PipelineTrainer::writeTrained(const std::string& planDir, const std::string& outDir, const ir::Graph* whole) {
  State& s = *state_;
  std::vector<std::pair<std::string, at::Tensor>> gathered; // rank 0: every stage's, for `whole`
  std::set<std::string> gatheredNames;
  // Tags above every step's (< 2^29): one per (stage, parameter) in stage and name order.
  auto tag = static_cast<std::uint32_t>(kMessageTagLimit);
  for (int i = 0; i < static_cast<int>(s.stages.size()); ++i) {
    Stage& stage = s.stages[i];
    const auto shapes = changedShapes(*stage.graph); // by name: the order of the messages
    const std::uint32_t first = tag;
    tag += static_cast<std::uint32_t>(shapes.size());
    std::map<std::string, at::Tensor> own;
    if (s.own(i)) {
      for (auto& [name, tensor] : changedByTraining(*stage.executor))
        own[name] = tensor.detach();
      for (const auto& entry : shapes)
        if (!own.count(entry.first))
          return Error(ErrorCode::InvalidGraph) << "stage '" << stage.name << "': no trained tensor '" << entry.first << "'";
    }
    if (s.comm->rank() != 0) {
      std::uint32_t t = first;
      if (s.own(i))
        for (const auto& entry : shapes)
          CLEAVE_CHECK(s.comm->send(own.at(entry.first), 0, t++));
      continue;
    }
    std::vector<std::pair<std::string, at::Tensor>> trained;
    std::uint32_t t = first;
    for (const auto& entry : shapes) {
      if (s.own(i)) {
        trained.emplace_back(entry.first, own.at(entry.first));
        continue;
      }
      CLEAVE_TRY(at::Tensor tensor, s.comm->recv(stage.rank, t++));
      trained.emplace_back(entry.first, tensor);
    }
    CLEAVE_TRY(ir::Graph graph, withTrainedParameters(*stage.graph, trained));
    CLEAVE_CHECK(io::writeOnnx(graph, (std::filesystem::path(outDir) / stage.file).string()));
    for (auto& entry : trained) // a tied parameter's copies are equal: the first stage's is kept
      if (gatheredNames.insert(entry.first).second)
        gathered.push_back(std::move(entry));
  }
  CLEAVE_CHECK(s.comm->finish());
  if (s.comm->rank() != 0)
    return {};
  if (whole) {
    CLEAVE_TRY(ir::Graph graph, withTrainedParameters(*whole, gathered));
    CLEAVE_CHECK(io::writeOnnx(graph, (std::filesystem::path(outDir) / "trained.onnx").string()));
  }
  CLEAVE_TRY(std::string planText, readFile((std::filesystem::path(planDir) / "plan.json").string()));
  return writeFileAtomically((std::filesystem::path(outDir) / "plan.json").string(), planText);
}

RankTrainingState PipelineTrainer::trainingState() {
  RankTrainingState state{state_->optimized, state_->optimizer.get()};
  for (const Stage& stage : state_->stages)
    if (stage.executor)
      for (auto& [name, tensor] : stage.executor->updatedStatistics())
        state.parameters.emplace_back(stage.name + "/" + name, tensor);
  return state;
}

std::size_t PipelineTrainer::stages() const { return state_->stages.size(); }

const plan::PlanFile& PipelineTrainer::planFile() const { return state_->plan->file(); }

const std::string& PipelineTrainer::stageName(std::size_t stage) const { return state_->stages[stage].name; }

std::vector<const ir::Graph*> PipelineTrainer::stageGraphs() const {
  std::vector<const ir::Graph*> graphs;
  for (const Stage& stage : state_->stages)
    graphs.push_back(stage.graph.get());
  return graphs;
}

int PipelineTrainer::stageRank(std::size_t stage) const { return state_->stages.at(stage).rank; }

const std::vector<std::string>& PipelineTrainer::graphInputs() const { return state_->plan->graphInputs(); }

std::vector<std::string> PipelineTrainer::ownStages() const {
  std::vector<std::string> names;
  for (int i = 0; i < static_cast<int>(state_->stages.size()); ++i)
    if (state_->own(i))
      names.push_back(state_->stages[i].name);
  return names;
}

Expected<StepResult> PipelineTrainer::step(const TrainingData& data, std::int64_t stepIndex,
                                       const pipeline::Schedule* schedule) {
  State& s = *state_;
  if (!s.comm)
    return Error(ErrorCode::InvalidArgument) << "the trainer is not connected";
  auto started = std::chrono::steady_clock::now();
  const std::size_t headersBefore = s.comm->headersSent();
  s.comm->resetReceiveBufferPeak();
  const double transportBefore = s.comm->transportCpuSeconds();
  CLEAVE_TRY(std::vector<TensorMap> chunks, s.replicaMicrobatches(data, stepIndex));
  s.stepIndex = stepIndex;
  if (schedule && schedule->microbatches != chunks.size())
    return Error(ErrorCode::InvalidArgument) << "the schedule is for " << schedule->microbatches << " microbatches; "
                                             << s.options.batch / s.replicaCount << " rows make " << chunks.size();
  s.resetTiming(chunks.size());
  const std::vector<double> shares = s.startMicrobatches(chunks);
  clearGradients(*s.optimizer);
  resetHostMemoryPeak();
  const std::int64_t bytesAtStart = hostMemoryStats().bytesInUse;
  s.stepPeakBytes = bytesAtStart;
  std::vector<std::map<int, StageRun>> runs(chunks.size());
  double lossSum = 0.0;
  const std::vector<pipeline::Action> actions =
      pipeline::rankComputeActions(schedule, static_cast<std::uint32_t>(s.stages.size()), static_cast<std::uint32_t>(chunks.size()),
                                   static_cast<std::uint32_t>(s.worldSize), static_cast<std::uint32_t>(s.rank), true);
  CLEAVE_TRY(ReceiveOrder* receives, s.restartReceives(schedule, chunks.size(), actions, true));
  const ReceiveOrder::Post post = [&](int peer, std::uint32_t tag, std::uint64_t key) {
    return s.comm->postRecv(peer, tag, key);
  };
  const std::vector<std::vector<int>> gradientsDone =
      s.replicas ? s.gradientsDoneAfter(actions) : std::vector<std::vector<int>>(actions.size());
  for (std::size_t k = 0; k < actions.size(); ++k) {
    CLEAVE_CHECK(receives->postThrough(k + kReceiveLookahead, post));
    CLEAVE_CHECK(s.runAction(actions[k], chunks, shares, runs, lossSum, started));
    for (int done : gradientsDone[k])
      CLEAVE_CHECK(s.startReplicaSum(done));
  }
  CLEAVE_CHECK(s.comm->finish());
  s.timing.scheduleSeconds = secondsSince(started);
  CLEAVE_CHECK(s.finishReplicaSums());
  s.timing.rankScheduleSeconds[static_cast<std::size_t>(s.rank)] = s.timing.scheduleSeconds;
  s.timing.rankTransportSeconds[static_cast<std::size_t>(s.rank)] = s.comm->transportCpuSeconds() - transportBefore;
  s.timing.headersSent = static_cast<double>(s.comm->headersSent() - headersBefore);
  const ReceiveBufferStats buffers = s.comm->receiveBuffers();
  s.timing.rankReceiveBufferPeakBytes[static_cast<std::size_t>(s.rank)] = static_cast<double>(buffers.peakTakenBytes);
  s.timing.rankReceiveBufferHeldBytes[static_cast<std::size_t>(s.rank)] = static_cast<double>(buffers.heldBytes);
  runs.clear(); // the step's activations, freed before the optimizer allocates its state
  s.timing.rankPeakStepBytes[static_cast<std::size_t>(s.rank)] =
      static_cast<double>(std::max(s.stepPeakBytes, hostMemoryStats().peakBytesInUse) - bytesAtStart);
  CLEAVE_CHECK(s.reduceTiedGradients());
  // Every rank learns the loss and the gradients' norm before any updates, so all skip or stop
  // at the same step (finishStep).
  StepResult result;
  CLEAVE_TRY(const double gradNorm, s.reduceLossAndGradientNorm(lossSum, result.loss));
  CLEAVE_CHECK(finishStep(*s.optimizer, s.options, stepIndex, gradNorm, result));
  s.timing.stepSeconds = secondsSince(started);
  return result;
}

Expected<double> PipelineTrainer::evaluate(const TrainingData& data, std::int64_t batches) {
  State& s = *state_;
  if (!s.comm)
    return Error(ErrorCode::InvalidArgument) << "the trainer is not connected";
  c10::NoGradGuard noGrad;
  ForwardEvaluation evaluation;
  const ReceiveOrder::Post post = [&](int peer, std::uint32_t tag, std::uint64_t key) {
    return s.comm->postRecv(peer, tag, key);
  };
  double lossSum = 0.0;
  for (std::int64_t b = 0; b < batches; ++b) {
    CLEAVE_TRY(std::vector<TensorMap> chunks, s.replicaMicrobatches(data, b));
    const std::vector<double> shares = s.startMicrobatches(chunks);
    const std::vector<pipeline::Action> actions = pipeline::rankComputeActions(
        nullptr, static_cast<std::uint32_t>(s.stages.size()), static_cast<std::uint32_t>(chunks.size()),
        static_cast<std::uint32_t>(s.worldSize), static_cast<std::uint32_t>(s.rank), false);
    CLEAVE_TRY(ReceiveOrder* receives, s.restartReceives(nullptr, chunks.size(), actions, false));
    std::vector<std::map<int, StageRun>> runs(chunks.size());
    for (std::size_t k = 0; k < actions.size(); ++k) {
      CLEAVE_CHECK(receives->postThrough(k + kReceiveLookahead, post));
      const pipeline::Action& action = actions[k];
      if (action.type == pipeline::ActionType::Forward)
        CLEAVE_CHECK(s.forwardStage(action.microbatch, static_cast<int>(action.stage), chunks[action.microbatch], runs,
                                    lossSum, shares[action.microbatch]));
    }
    CLEAVE_CHECK(s.comm->finish());
  }
  at::Tensor total = at::full({1}, lossSum, at::kDouble); // the loss stage's rank of each replica holds it
  CLEAVE_CHECK(s.comm->allReduceSum(total));
  if (s.replicas)
    CLEAVE_CHECK(s.replicas->allReduceSum(total));
  return total.item<double>() / static_cast<double>(batches);
}

} // namespace cleave::runtime::distributed
