#include "runtime/training/train.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "ir/extract.h"
#include "runtime/engine/executor.h"
#include "runtime/model/microbatch.h"
#include "runtime/training/trainable_set.h"
#include "base/strings.h"

#include <cmath>
#include <mutex>
#include <sstream>

namespace cleave::runtime {

struct Trainer::State {
  std::shared_ptr<const ir::Graph> graph;
  std::unique_ptr<Executor> executor;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  TrainOptions options;
  std::string lossName;
};

namespace {
Expected<std::string> lossOutput(const ir::Graph& graph, const std::string& wanted) {
  std::vector<std::string> scalars;
  for (ir::ValueId value : graph.graphOutputs()) {
    std::string name(graph.valueName(value));
    if (!wanted.empty() ? name == wanted : name == "loss")
      return name;
    if (graph.dims(value).empty() && graph.valueKind(value) == ir::ValueKind::Tensor)
      scalars.push_back(name);
  }
  if (!wanted.empty())
    return Error(ErrorCode::InvalidArgument) << "the model has no output '" << wanted << "' (--loss)";
  if (scalars.size() == 1)
    return scalars[0];
  return Error(ErrorCode::InvalidArgument) << "which output is the loss? none is named 'loss' and " << scalars.size()
                                           << " are scalars (export the model with its loss; name it with --loss)";
}

} // namespace

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(std::vector<at::Tensor> params, const OptimizerOptions& o) {
  if (o.kind == OptimizerKind::Sgd)
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weightDecay.value_or(0.0)));
  return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(o.lr)
                                                           .betas({o.beta1, o.beta2})
                                                           .eps(o.eps)
                                                           .weight_decay(o.weightDecay.value_or(0.01)));
}

void clearGradients(torch::optim::Optimizer& optimizer) {
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups())
    for (at::Tensor& param : group.params())
      param.mutable_grad().reset();
}

void stepOptimizer(torch::optim::Optimizer& optimizer) {
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups())
    for (at::Tensor& param : group.params())
      if (!param.grad().defined())
        param.mutable_grad() = at::zeros_like(param);
  optimizer.step();
}

void seedForward(std::uint64_t seed, std::int64_t stage, std::int64_t step, std::int64_t microbatch) {
  // splitmix64 over the coordinates: nearby coordinates give unrelated seeds.
  std::uint64_t mixed = seed;
  for (std::int64_t part : {stage, step, microbatch}) {
    mixed += 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(part);
    mixed = (mixed ^ (mixed >> 30)) * 0xbf58476d1ce4e5b9ULL;
    mixed = (mixed ^ (mixed >> 27)) * 0x94d049bb133111ebULL;
    mixed ^= mixed >> 31;
  }
  seedGenerators(mixed);
}


void enterForwardPrecision(std::optional<AutocastScope>& scope, const TrainOptions& options, c10::DeviceType device) {
  if (options.precision == Precision::Bf16)
    scope.emplace(device, at::kBFloat16);
}

double squaredGradientNorm(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> norms; // on the gradients' device: one copy to the host, not one per tensor
  for (const at::Tensor& param : params)
    if (param.grad().defined())
      norms.push_back(at::linalg_vector_norm(param.grad(), 2).to(at::kDouble));
  if (norms.empty())
    return 0.0;
  const at::Tensor all = at::stack(norms).to(at::kCPU);
  const double* values = all.data_ptr<double>();
  double sum = 0.0;
  for (std::int64_t i = 0; i < all.numel(); ++i)
    sum += values[i] * values[i];
  return sum;
}

Expected<bool> skipNonFiniteStep(const TrainOptions& options, std::int64_t stepIndex, double loss, double gradNorm) {
  if (std::isfinite(loss) && std::isfinite(gradNorm))
    return false;
  if (options.nonFinite == NonFinitePolicy::Skip)
    return true;
  std::ostringstream what;
  if (!std::isfinite(loss))
    what << "the loss is " << loss;
  else
    what << "the gradients' norm is " << gradNorm << " (the loss " << loss << ")";
  return Error(ErrorCode::InvalidArgument) << "step " << stepIndex + 1 << ": " << what.str()
                                           << ": the run stops before this step changes any parameter, and writes "
                                              "nothing (--skip-nonfinite skips such steps instead)";
}

Status finishStep(torch::optim::Optimizer& optimizer, const TrainOptions& options, std::int64_t stepIndex,
                  double gradNorm, StepResult& result) {
  CLEAVE_TRY(result.skipped, skipNonFiniteStep(options, stepIndex, result.loss, gradNorm));
  if (options.clipGradNorm)
    result.gradNorm = gradNorm;
  if (!result.skipped) {
    result.lr = updateParameters(optimizer, options, stepIndex, gradNorm);
    return {};
  }
  clearGradients(optimizer);
  result.lr = options.optimizer.lr * options.lrSchedule.factor(stepIndex);
  return {};
}

double updateParameters(torch::optim::Optimizer& optimizer, const TrainOptions& options, std::int64_t stepIndex,
                        double gradNorm) {
  if (options.clipGradNorm) {
    const double coefficient = *options.clipGradNorm / (gradNorm + 1e-6);
    if (coefficient < 1.0) // torch multiplies by min(1, coefficient): by 1 changes nothing
      for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups())
        for (at::Tensor& param : group.params())
          if (param.grad().defined())
            param.mutable_grad().mul_(coefficient);
  }
  const double lr = options.optimizer.lr * options.lrSchedule.factor(stepIndex);
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups())
    group.options().set_lr(lr);
  stepOptimizer(optimizer);
  return lr;
}

Trainer::~Trainer() = default;

Expected<std::unique_ptr<Trainer>> Trainer::create(std::shared_ptr<const ir::Graph> graph, const TrainOptions& options,
                                                   const Backend& backend) {
  std::unique_ptr<Trainer> trainer(new Trainer());
  trainer->state_ = std::make_unique<State>();
  State& s = *trainer->state_;
  s.graph = std::move(graph);
  s.options = options;
  const ir::Graph* model = s.graph.get();
  CLEAVE_CHECK(checkTrainableAsExported({&model, 1}));
  CLEAVE_TRY(s.lossName, lossOutput(*s.graph, options.loss));
  CLEAVE_TRY(s.executor, backend.lowerTrainable(s.graph));
  s.executor->setSelectiveRecompute(options.recompute == Recompute::Selective);
  std::vector<at::Tensor> params;
  for (auto& [name, tensor] : s.executor->trainableParameters())
    params.push_back(tensor);
  if (params.empty())
    return Error(ErrorCode::InvalidArgument) << "the model has no floating parameters to train";
  s.optimizer = makeOptimizer(params, options.optimizer);
  return trainer;
}

std::vector<std::pair<std::string, at::Tensor>> changedByTraining(const Executor& executor) {
  std::vector<std::pair<std::string, at::Tensor>> changed = executor.trainableParameters();
  for (auto& statistic : executor.updatedStatistics())
    changed.push_back(std::move(statistic));
  return changed;
}

RankTrainingState Trainer::trainingState() { return {changedByTraining(*state_->executor), state_->optimizer.get()}; }

Expected<StepResult> Trainer::step(const TrainingData& data, std::int64_t stepIndex) {
  State& s = *state_;
  CLEAVE_TRY(std::vector<TensorMap> chunks,
             data.microbatches(stepIndex * s.options.batch, s.options.batch, s.options.microbatches));
  clearGradients(*s.optimizer);
  double total = 0.0;
  for (std::size_t m = 0; m < chunks.size(); ++m) {
    const TensorMap& chunk = chunks[m];
    seedForward(s.options.seed, 0, stepIndex, static_cast<std::int64_t>(m));
    std::int64_t rows = chunk.begin()->second.dim() > 0 ? chunk.begin()->second.size(0) : s.options.batch;
    std::optional<AutocastScope> precision;
    enterForwardPrecision(precision, s.options, s.executor->device().type());
    Expected<TensorMap> ran = s.executor->run(chunk);
    precision.reset();
    CLEAVE_TRY(TensorMap outputs, std::move(ran));
    const at::Tensor& loss = outputs.at(s.lossName);
    if (loss.numel() != 1 || !loss.requires_grad())
      return Error(ErrorCode::InvalidArgument) << "output '" << s.lossName
                                               << "' is not a scalar that depends on the trained parameters";
    at::Tensor share = loss.reshape({}) * (static_cast<double>(rows) / static_cast<double>(s.options.batch));
    try {
      share.backward();
    } catch (const c10::Error& e) {
      return Error(ErrorCode::Unsupported) << "backward failed: " << firstLine(e.what_without_backtrace());
    }
    total += share.item<double>();
  }
  StepResult result{total, 0.0, std::nullopt};
  const double gradNorm = std::sqrt(squaredGradientNorm(s.optimizer->param_groups().front().params()));
  CLEAVE_CHECK(finishStep(*s.optimizer, s.options, stepIndex, gradNorm, result));
  return result;
}

Expected<double> Trainer::evaluate(const TrainingData& data, std::int64_t batches) {
  State& s = *state_;
  c10::NoGradGuard noGrad;
  ForwardEvaluation evaluation;
  double total = 0.0;
  for (std::int64_t b = 0; b < batches; ++b) {
    CLEAVE_TRY(std::vector<TensorMap> chunks, data.microbatches(b * s.options.batch, s.options.batch, s.options.microbatches));
    for (const TensorMap& chunk : chunks) {
      std::optional<AutocastScope> precision;
      enterForwardPrecision(precision, s.options, s.executor->device().type());
      CLEAVE_TRY(TensorMap outputs, s.executor->run(chunk));
      const double rows = static_cast<double>(chunk.begin()->second.size(0));
      total += outputs.at(s.lossName).item<double>() * rows / static_cast<double>(s.options.batch);
    }
  }
  return total / static_cast<double>(batches);
}

Expected<ir::Graph> Trainer::trainedGraph() const {
  return withTrainedParameters(*state_->graph, changedByTraining(*state_->executor));
}

Expected<ir::Graph> withTrainedParameters(const ir::Graph& g,
                                          const std::vector<std::pair<std::string, at::Tensor>>& trained) {
  std::map<std::string, std::string> bytes;
  for (const auto& [name, tensor] : trained) {
    at::Tensor plain = tensor.detach().to(at::kCPU).contiguous();
    bytes[name] = std::string(static_cast<const char*>(plain.data_ptr()), plain.nbytes());
  }
  std::vector<ir::NodeId> ops;
  std::vector<ir::ValueId> inputs;
  for (std::uint32_t n = 0; n < g.numNodes(); ++n) {
    ir::NodeId node{n};
    if (g.kind(node) == ir::NodeKind::Op)
      ops.push_back(node);
    else if (g.kind(node) == ir::NodeKind::Input)
      inputs.push_back(g.outputs(node)[0]);
  }
  std::vector<ir::ValueId> outputs(g.graphOutputs().begin(), g.graphOutputs().end());
  return ir::extractSubgraph(g, {std::string(g.modelInfo().graphName), ops, inputs, outputs, nullptr, &bytes});
}

} // namespace cleave::runtime
