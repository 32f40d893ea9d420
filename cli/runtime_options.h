// cli/runtime_options.h - the options every running command shares (--backend, --inputs,
// --seed, --dim) and opening what they run.
// Complexity: random inputs are linear in their elements; opening is the model's load.
#pragma once

#include <map>
#include <memory>

#include "cli/commands.h"
#include "pipeline/schedule.h"
#include "runtime/model/runnable.h"

namespace cleave::cli {

struct RuntimeOptions {
  std::string backend = "aten-cpu";
  std::string inputsPath;
  std::uint64_t seed = 0;
  std::vector<std::string> dims; // "name=value" for symbolic dims
  bool random = false;           // --random: the default without --inputs
  runtime::Optimizations optimizations; // --no-fusion, --no-blocked-layout, --no-packed-weights, --no-winograd,
                                        // --no-blocked-convolutions, --no-join
};

void addRuntimeOptions(CLI::App& app, RuntimeOptions& options);

struct OpenedRunnable {
  std::unique_ptr<runtime::Backend> acc, cpu; // outlive the runnable's modules
  runtime::Runnable runnable;
};

Expected<OpenedRunnable> openRunnable(const std::string& path, const RuntimeOptions& options);
Expected<std::map<std::string, std::int64_t>> parseDims(const std::vector<std::string>& dims);
// --inputs FILE, else random inputs from --seed.
Expected<runtime::TensorMap> makeInputs(const runtime::Runnable& runnable, const RuntimeOptions& options);
Expected<runtime::TensorMap> makeInputs(const ir::Graph& graph, const RuntimeOptions& options);

// --schedule KIND for the distributed runners (cleave run --distributed, cleave train).
void addScheduleOption(CLI::App& app, std::optional<pipeline::ScheduleKind>& kind, const std::string& help);
// KIND's schedule of a plan's `stages` over `microbatches` on `ranks` (stage s on rank s % ranks):
// the generator's own checks fail as usage errors; then it is validated for the runners' transport
// (buffered sends, channels in order), so the ranks following it cannot deadlock.
Expected<pipeline::Schedule> rankSchedule(pipeline::ScheduleKind kind, std::size_t stages, std::int64_t microbatches,
                                          int ranks);

} // namespace cleave::cli
