// cli/cmd_run.cpp - `cleave run MODEL|OUT_DIR [--inputs FILE | --random --seed S] [--repeat N]`.
#include <algorithm>
#include <map>
#include <sstream>

#include "cli/commands.h"
#include "cli/runtime_options.h"
#include "plan/plan_file.h"
#include "report/json_util.h"
#include "runtime/microbatch.h"

namespace cleave::cli {
namespace {
constexpr std::size_t kSlowestNodes = 10; // how many nodes --profile lists
} // namespace

int runRun(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Run a model, or a cut model (a split/partition output directory), on ATen; print output "
               "summaries and timings.",
               "cleave run"};
  std::string path, saveOutputs;
  RuntimeOptions runtime;
  int repeat = 1;
  bool json = false, profile = false, pipelined = false;
  std::int64_t microbatches = 1;
  app.add_option("MODEL", path, "ONNX model, or a directory with plan.json")->required();
  addRuntimeOptions(app, runtime);
  app.add_option("--repeat", repeat, "runs to time (the first one is included)")->capture_default_str();
  app.add_option("--save-outputs", saveOutputs, "write the outputs to a tensor file (JSON)");
  app.add_flag("--pipeline", pipelined,
               "run a pipeline plan's stages microbatch by microbatch (inputs split along dim 0, outputs merged)");
  app.add_option("--microbatches", microbatches, "microbatches for --pipeline")->capture_default_str();
  app.add_flag("--profile", profile, "time every kernel; report seconds per op type and the slowest nodes (last run)");
  app.add_flag("--json", json, "print a JSON summary");
  if (int code = parseArguments(app, args, out, err); code >= 0)
    return code;
  if (repeat < 1) {
    err << "cleave run: usage error: --repeat must be at least 1\n";
    return kExitUsage;
  }
  if (pipelined && !plan::isPlanDirectory(path)) {
    err << "cleave run: usage error: --pipeline runs a cut model directory (cleave pipeline -o DIR)\n";
    return kExitUsage;
  }
  Expected<OpenedRunnable> opened = openRunnable(path, runtime);
  if (!opened)
    return reportError("cleave run", opened.error(), err);
  Expected<runtime::TensorMap> inputs = makeInputs(opened->runnable, runtime);
  if (!inputs)
    return reportError("cleave run", inputs.error(), err);
  std::vector<double> seconds;
  std::vector<runtime::SubmoduleTiming> timings;
  runtime::TensorMap outputs;
  runtime::RunStats stats;
  for (int i = 0; i < repeat; ++i) {
    std::vector<runtime::SubmoduleTiming> these;
    stats = runtime::RunStats();
    stats.profileOps = profile;
    auto start = std::chrono::steady_clock::now();
    Expected<runtime::TensorMap> result = Error(ErrorCode::InvalidArgument);
    if (pipelined) {
      Expected<std::vector<runtime::TensorMap>> chunks = runtime::splitMicrobatches(*inputs, microbatches);
      if (!chunks)
        return reportError("cleave run", chunks.error(), err);
      std::vector<runtime::TensorMap> outs;
      for (const runtime::TensorMap& chunk : *chunks) {
        Expected<runtime::TensorMap> part = opened->runnable.run(chunk, &these, &stats);
        if (!part)
          return reportError("cleave run", part.error(), err);
        outs.push_back(std::move(*part));
      }
      result = runtime::mergeMicrobatches(outs);
    } else {
      result = opened->runnable.run(*inputs, &these, &stats);
    }
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!result)
      return reportError("cleave run", result.error(), err);
    outputs = std::move(*result);
    if (timings.empty())
      timings = these;
    else
      for (std::size_t k = 0; k < timings.size() && k < these.size(); ++k)
        timings[k].seconds = std::min(timings[k].seconds, these[k].seconds);
  }
  if (!saveOutputs.empty())
    if (Status written = runtime::writeTensorFile(outputs, saveOutputs); !written)
      return reportError("cleave run", written.error(), err);
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  report::Json summary;
  summary["model"] = path;
  summary["submodules"] = opened->runnable.submodules();
  if (pipelined)
    summary["microbatches"] = microbatches;
  for (const auto& [name, tensor] : outputs) {
    at::Tensor cpu = tensor.to(at::kCPU);
    summary["outputs"][name] = {{"summary", runtime::summarize(cpu)}, {"shape", cpu.sizes().vec()}};
  }
  summary["timing"] = {{"runs", repeat}, {"min_s", sorted.front()}, {"median_s", sorted[sorted.size() / 2]}};
  report::Json steps = report::Json::array();
  for (const runtime::SubmoduleTiming& timing : timings)
    steps.push_back({{"name", timing.name}, {"backend", timing.backend}, {"min_s", timing.seconds}});
  summary["timing"]["steps"] = std::move(steps);
  // Op types by kernel time, largest first (ties by name).
  std::vector<std::pair<std::string, double>> byOp(stats.secondsByOp.begin(), stats.secondsByOp.end());
  std::stable_sort(byOp.begin(), byOp.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  // The slowest nodes, largest first (ties by name).
  std::vector<std::pair<std::string, double>> byNode(stats.secondsByNode.begin(), stats.secondsByNode.end());
  std::stable_sort(byNode.begin(), byNode.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  byNode.resize(std::min<std::size_t>(byNode.size(), kSlowestNodes));
  if (profile) {
    for (const auto& [op, seconds] : byOp)
      summary["profile"].push_back({{"op", op}, {"seconds", seconds}});
    for (const auto& [node, seconds] : byNode)
      summary["slowest_nodes"].push_back({{"node", node}, {"seconds", seconds}});
  }
  if (json) {
    out << report::dumpJson(summary);
    return kExitOk;
  }
  std::ostringstream text;
  for (const auto& [name, tensor] : outputs)
    text << name << ": " << runtime::summarize(tensor) << "\n";
  text << "time: median " << sorted[sorted.size() / 2] * 1e3 << " ms, min " << sorted.front() * 1e3 << " ms over "
       << repeat << " run(s)\n";
  if (profile) {
    text << "kernel time by op (last run):\n";
    for (const auto& [op, seconds] : byOp)
      text << "  " << op << ": " << seconds * 1e3 << " ms\n";
    text << "slowest nodes (last run):\n";
    for (const auto& [node, seconds] : byNode)
      text << "  " << node << ": " << seconds * 1e3 << " ms\n";
  }
  if (timings.size() > 1)
    for (const runtime::SubmoduleTiming& timing : timings)
      text << "  " << timing.name << " (" << timing.backend << "): " << timing.seconds * 1e3 << " ms\n";
  out << text.str();
  return kExitOk;
}

} // namespace cleave::cli
