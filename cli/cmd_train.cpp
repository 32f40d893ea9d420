// cli/cmd_train.cpp - `cleave train MODEL --data FILE --batch B --steps K [--microbatches M]
// [--optimizer sgd|adamw --lr X --momentum --weight-decay --betas B1,B2] [--loss NAME] [-o OUT] [--json]`.
#include <filesystem>

#include "cli/commands.h"
#include "cli/options.h"
#include "io/model_loader.h"
#include "io/onnx.h"
#include "plan/plan_file.h"
#include "runtime/tensor_files.h"
#include "runtime/train.h"

namespace cleave::cli {
namespace {
struct TrainFlags {
  std::string path, dataPath;
  std::int64_t steps = 1;
  std::vector<double> betas;
  std::optional<double> weightDecay;
  runtime::TrainOptions options;
  OutputDirectoryFlags output;
  bool json = false;
};

void describe(CLI::App& app, TrainFlags& flags) {
  app.description("Train a model exported with its loss (targets are inputs) on ATen autograd and PyTorch's own "
                  "optimizers: per step the next --batch rows of --data, in --microbatches (gradients accumulated, "
                  "each loss scaled by its share of the rows), then one optimizer step. Prints each step's loss; "
                  "-o DIR gets trained.onnx.");
  addModelInput(app, flags.path);
  app.add_option("--data", flags.dataPath, "training data: every model input, rows along dim 0 (.npz, .json, folder)")
      ->required();
  app.add_option("--batch", flags.options.batch, "rows per step")->required()->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--steps", flags.steps, "optimizer steps")->capture_default_str()->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--microbatches", flags.options.microbatches, "microbatches per step")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  addEnumOption(app, "--optimizer", flags.options.optimizer.kind, runtime::kOptimizerKinds, "optimizer");
  app.add_option("--lr", flags.options.optimizer.lr, "learning rate")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--momentum", flags.options.optimizer.momentum, "sgd momentum")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", flags.weightDecay, "weight decay (default: PyTorch's, sgd 0, adamw 0.01)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--betas", flags.betas, "adamw betas B1,B2 (default 0.9,0.999)")->delimiter(',')->expected(2);
  app.add_option("--loss", flags.options.loss, "the output that is the loss (default: 'loss', else the only scalar)");
  addOutputDirectory(app, flags.output, "directory for trained.onnx");
  addJsonFlag(app, flags.json);
}

Status train(TrainFlags& flags, std::ostream& out, std::ostream&) {
  if (plan::isPlanDirectory(flags.path))
    return usageError() << "training a cut model (plan directory) is not supported yet: train the model itself";
  if (!flags.betas.empty()) {
    flags.options.optimizer.beta1 = flags.betas[0];
    flags.options.optimizer.beta2 = flags.betas[1];
  }
  flags.options.optimizer.weightDecay = flags.weightDecay;
  CLEAVE_TRY(std::optional<OutputDirectory> outDir, openOutputDirectory(flags.output, {flags.path, flags.dataPath}));
  CLEAVE_TRY(ir::Graph loaded, io::loadModel(flags.path));
  auto graph = std::make_shared<const ir::Graph>(std::move(loaded));
  std::vector<std::string> inputs;
  for (ir::NodeId node : graph->inputNodes())
    inputs.emplace_back(graph->valueName(graph->outputs(node)[0]));
  CLEAVE_TRY(runtime::TensorMap data, runtime::readTensors(flags.dataPath, inputs));
  CLEAVE_TRY(std::unique_ptr<runtime::Trainer> trainer, runtime::Trainer::create(graph, flags.options));
  for (std::int64_t step = 0; step < flags.steps; ++step) {
    CLEAVE_TRY(double loss, trainer->step(data, step));
    if (flags.json)
      out << toJsonText(Json{{"step", step + 1}, {"loss", loss}}) << "\n"; // one line per step
    else
      out << "step " << step + 1 << "/" << flags.steps << ": loss " << loss << "\n";
    out.flush();
  }
  if (!outDir)
    return {};
  CLEAVE_TRY(ir::Graph trained, trainer->trainedGraph());
  CLEAVE_CHECK(io::writeOnnx(trained, (std::filesystem::path(outDir->stagingPath()) / "trained.onnx").string()));
  return outDir->commit();
}
} // namespace

const Command kTrainCommand{"train", "train a model exported with its loss (ATen autograd, PyTorch's optimizers)",
                            parseThenRun<TrainFlags, describe, train>};

} // namespace cleave::cli
