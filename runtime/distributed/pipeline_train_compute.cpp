// runtime/distributed/pipeline_train_compute.cpp - a stage's compute within a pipeline step: forwards (in the options' precision, recomputed
// where asked), the gradients arriving at its outputs, backwards (B, or I then W), one action of the schedule
// (pipeline_train_state.h).
#include "runtime/distributed/pipeline_train_state.h"

namespace cleave::runtime::distributed {

Status PipelineTrainer::State::forwardStage(std::size_t m, int i, const TensorMap& chunk,
                                            std::vector<std::map<int, StageRun>>& runs, double& lossSum,
                                            double share) {
  {
    StageRun& run = runs[m][i];
    TensorMap feeds;
    for (const std::string& name : stages[i].inputs) {
      const int made = producerOf(name);
      at::Tensor value;
      if (made == kGraphInput) {
        value = chunk.at(name);
      } else if (own(made)) {
        // As a message would arrive (communicator.h: dense and contiguous): ATen's kernels may
        // round differently for other strides, and a stage must compute the same bytes whichever
        // rank produced its inputs.
        value = denseFromPrivateLayout(runs[m].at(made).outputs.at(name).detach()).contiguous();
      } else {
        CLEAVE_TRY(std::uint32_t t, tag(m, name, i, false));
        const pipeline::Action forward{static_cast<std::uint32_t>(i), pipeline::ActionType::Forward, static_cast<std::uint32_t>(m)};
        CLEAVE_TRY(value, receive(stages[made].rank, t, shapeKey(m, name, i, false), forward, name));
      }
      if (made != kGraphInput && at::isFloatingType(value.scalar_type()))
        value.requires_grad_(true);
      feeds[name] = value;
      if (made != kGraphInput)
        run.leaves[name] = value;
    }
    auto started = std::chrono::steady_clock::now();
    seedForward(options.seed, i, stepIndex, static_cast<std::int64_t>(m));
    if (options.recompute == Recompute::Stage) {
      // With the graph, then without it: the kernels take the paths the recomputation will
      // (without it, oneDNN's direct ones), so what is sent equals what is differentiated.
      run.generatorState = generatorStates();
      CLEAVE_TRY(run.outputs, runForward(i, feeds));
      for (auto& output : run.outputs)
        output.second = output.second.detach();
      run.feeds = std::move(feeds);
    } else {
      CLEAVE_TRY(run.outputs, runForward(i, feeds));
    }
    timing.forwardSeconds[i] += secondsSince(started);
    CLEAVE_TRY(std::vector<OutgoingMessage> sends,
               sendsOf(rank, {static_cast<std::uint32_t>(i), pipeline::ActionType::Forward, static_cast<std::uint32_t>(m)}));
    for (const OutgoingMessage& out : sends)
      CLEAVE_CHECK(comm->send(run.outputs.at(out.value).detach(), out.receiver, out.tag, out.shapeKey));
    if (i == lossStage)
      lossSum += run.outputs.at(loss).item<double>() * share;
    if (options.recompute == Recompute::Stage) // sent: held only where a stage of this rank reads it
      for (auto output = run.outputs.begin(); output != run.outputs.end();)
        output = hasLocalReader(output->first) ? std::next(output) : run.outputs.erase(output);
  }
  return {};
}

// The gradients arriving at a stage's outputs for microbatch m: from the stages reading each
// output (received, or taken from a local reader's leaf gradients) plus the loss's share.
// Returns the outputs that get one (roots) and their gradients.
Status PipelineTrainer::State::outputGradients(const pipeline::Action& action, std::vector<std::map<int, StageRun>>& runs,
                                               double share, std::vector<at::Tensor>& roots,
                                               std::vector<at::Tensor>& grads) {
  const std::size_t m = action.microbatch;
  const int i = static_cast<int>(action.stage);
  StageRun& run = runs[m].at(i);
  for (const std::string& name : stages[i].outputs) {
    const at::Tensor& output = run.outputs.at(name);
    at::Tensor grad = name == loss ? at::full_like(output, share) : at::Tensor();
    for (int reader : readersOf(name)) {
      at::Tensor part;
      if (own(reader)) { // taken: this is its one use, and the step need not hold it on
        TensorMap& readerGrads = runs[m].at(reader).leafGrads;
        if (auto found = readerGrads.find(name); found != readerGrads.end()) {
          part = found->second.defined() ? found->second.contiguous() : at::Tensor(); // as a message arrives
          readerGrads.erase(found);
        }
      } else {
        CLEAVE_TRY(std::uint32_t t, tag(m, name, reader, true));
        CLEAVE_TRY(part, receive(stages[reader].rank, t, shapeKey(m, name, reader, true), action, name));
        part = part.to(output.device()); // Gloo's arrive on the CPU, a stage may train on a GPU
      }
      if (part.defined())
        grad = grad.defined() ? grad + part : part;
    }
    if (grad.defined() && output.requires_grad()) {
      roots.push_back(output);
      grads.push_back(grad.to(output.scalar_type()));
    }
  }
  return {};
}

// B (whole backward) or I (inputs' gradients only; W later): backpropagates the stage's output
// gradients, then hands each leaf's gradient to its producer (kept for a local one, sent to a
// remote one; zeros where none reached it, since the producer waits for it).
Status PipelineTrainer::State::backwardStage(std::size_t m, int i, std::vector<std::map<int, StageRun>>& runs,
                                             double share, bool inputsOnly) {
  StageRun& run = runs[m].at(i);
  if (options.recompute == Recompute::Stage) { // before waiting for the output gradients
    auto started = std::chrono::steady_clock::now();
    CLEAVE_CHECK(recomputeForward(i, run));
    timing.backwardSeconds[i] += secondsSince(started);
  }
  std::vector<at::Tensor> roots, grads;
  const pipeline::Action action{static_cast<std::uint32_t>(i),
                                inputsOnly ? pipeline::ActionType::BackwardInput : pipeline::ActionType::Backward,
                                static_cast<std::uint32_t>(m)};
  CLEAVE_CHECK(outputGradients(action, runs, share, roots, grads));
  std::vector<std::string> leafNames;
  std::vector<at::Tensor> leaves, leafGrads;
  for (const auto& [name, leaf] : run.leaves) {
    leafNames.push_back(name);
    leaves.push_back(leaf);
  }
  auto started = std::chrono::steady_clock::now();
  if (inputsOnly) {
    Expected<std::vector<at::Tensor>> found = backwardInputs(roots, grads, leaves, run.pendingWeights);
    if (!found)
      return std::move(found.error().withContext("stage '" + stages[i].name + "'"));
    leafGrads = std::move(*found);
  } else {
    try {
      if (!roots.empty())
        torch::autograd::backward(roots, grads);
    } catch (const c10::Error& e) {
      return Error(ErrorCode::Unsupported) << "stage '" << stages[i].name << "': backward failed: "
                                           << firstLine(e.what_without_backtrace());
    }
    for (const at::Tensor& leaf : leaves)
      leafGrads.push_back(leaf.grad());
  }
  timing.backwardSeconds[i] += secondsSince(started);
  TensorMap sentGrads; // by leaf name
  for (std::size_t l = 0; l < leaves.size(); ++l) {
    const std::string& name = leafNames[l];
    if (own(producerOf(name)))
      run.leafGrads[name] = leafGrads[l];
    else
      sentGrads[name] = leafGrads[l].defined() ? leafGrads[l] : at::zeros_like(leaves[l]);
  }
  CLEAVE_TRY(std::vector<OutgoingMessage> sends,
             sendsOf(rank, {static_cast<std::uint32_t>(i), pipeline::ActionType::Backward, static_cast<std::uint32_t>(m)}));
  for (const OutgoingMessage& out : sends)
    CLEAVE_CHECK(comm->send(sentGrads.at(out.value), out.receiver, out.tag, out.shapeKey));
  run.leaves.clear(); // the activations of this stage and microbatch are no longer needed
  run.outputs.clear(); // (what W needs, pendingWeights keeps)
  return {};
}

// W: the parameters' gradients that stage i's I for microbatch m held back.
Status PipelineTrainer::State::weightBackwardStage(std::size_t m, int i, std::vector<std::map<int, StageRun>>& runs) {
  auto run = runs[m].find(i);
  if (run == runs[m].end())
    return Error(ErrorCode::InvalidArgument) << "stage '" << stages[i].name << "': W of microbatch " << m << " before its I";
  auto started = std::chrono::steady_clock::now();
  Status done = backwardWeights(run->second.pendingWeights);
  if (!done)
    return std::move(done.error().withContext("stage '" + stages[i].name + "'"));
  double seconds = secondsSince(started);
  timing.backwardSeconds[i] += seconds;
  timing.weightSeconds[i] += seconds;
  return {};
}

Status PipelineTrainer::State::runAction(const pipeline::Action& action, const std::vector<TensorMap>& chunks,
                                         const std::vector<double>& shares, std::vector<std::map<int, StageRun>>& runs,
                                         double& lossSum, std::chrono::steady_clock::time_point started) {
  const int stage = static_cast<int>(action.stage);
  const std::size_t m = action.microbatch;
  const double begun = secondsSince(started), waitedBefore = timing.rankWaitSeconds[static_cast<std::size_t>(rank)];
  const double computedBefore = timing.computeSeconds(action.stage);
  const std::int64_t bytesBefore = beginActionMemory();
  switch (action.type) {
  case pipeline::ActionType::Forward: CLEAVE_CHECK(forwardStage(m, stage, chunks[m], runs, lossSum, shares[m])); break;
  case pipeline::ActionType::Backward: CLEAVE_CHECK(backwardStage(m, stage, runs, shares[m], false)); break;
  case pipeline::ActionType::BackwardInput: CLEAVE_CHECK(backwardStage(m, stage, runs, shares[m], true)); break;
  case pipeline::ActionType::BackwardWeight: CLEAVE_CHECK(weightBackwardStage(m, stage, runs)); break;
  default: return {}; // SEND/RECV: implied by F and B
  }
  recordActionMemory(action, bytesBefore);
  double* slot =
      &timing.actionSeconds[StepTiming::kSlotFields * StepTiming::actionSlot(action.stage, m, chunks.size(), action.type)];
  slot[0] = begun;
  slot[1] = secondsSince(started);
  slot[2] = timing.rankWaitSeconds[static_cast<std::size_t>(rank)] - waitedBefore;
  slot[3] = rank;
  slot[4] = timing.computeSeconds(action.stage) - computedBefore;
  return {};
}

Expected<TensorMap> PipelineTrainer::State::runForward(int i, const TensorMap& feeds) {
  TensorMap outputs;
  {
    std::optional<AutocastScope> precision;
    enterForwardPrecision(precision, options, stages[i].executor->device().type());
    CLEAVE_TRY(outputs, stages[i].executor->run(feeds));
  }
  if (options.precision != Precision::Fp32) // float32 runs make the plan's types already
    CLEAVE_CHECK(keepPlanTypes(outputs));
  return outputs;
}

Status PipelineTrainer::State::recomputeForward(int i, StageRun& run) {
  Expected<TensorMap> outputs = [&] {
    ForwardReplay replay(run.generatorState);
    return runForward(i, run.feeds);
  }();
  CLEAVE_TRY(run.outputs, std::move(outputs));
  run.feeds.clear();
  run.generatorState = GeneratorStates();
  return {};
}

Status PipelineTrainer::State::keepPlanTypes(TensorMap& outputs) const {
  for (auto& [name, tensor] : outputs) {
    const plan::PlanFileValue* declared = planShapes->value(name);
    if (!declared || !tensor.defined() || declared->kind != "tensor")
      continue;
    std::optional<ir::DType> dtype = ir::parseDTypeName(declared->dtype);
    if (!dtype)
      continue;
    CLEAVE_TRY(at::ScalarType type, scalarTypeOf(*dtype));
    if (tensor.scalar_type() != type && at::isFloatingType(tensor.scalar_type()) && at::isFloatingType(type))
      tensor = tensor.to(type);
  }
  return {};
}

} // namespace cleave::runtime::distributed
