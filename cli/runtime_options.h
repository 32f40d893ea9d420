// cli/runtime_options.h - the options every running command shares (--backend, --inputs,
// --seed, --dim, the optimizations) and the pipeline schedule's flag. Parsing only: nothing here
// loads the runtime library (opening what they name is cli/runtime_inputs.h, in the library).
// Complexity: linear in the arguments; a schedule is its generator's.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "pipeline/schedule.h"
#include "runtime/engine/optimizations.h"
#include "runtime/model/host_backend.h"

namespace cleave::cli {

struct RuntimeOptions {
  std::string backend = runtime::kHostBackend;
  std::string inputsPath;
  std::uint64_t seed = 0;
  std::vector<std::string> dims; // "name=value" for symbolic dims
  bool random = false;           // --random: the default without --inputs
  // --no-fusion, --no-blocked-layout, --no-shape-memo, --no-join, and the wings' switches
  // (runtime/cpu/cpu_switches.h, runtime/cuda/cuda_switches.h: --no-winograd, --tf32, ...).
  runtime::Optimizations optimizations;
};

void addRuntimeOptions(CLI::App& app, RuntimeOptions& options);

// --dim NAME=SIZE entries by name.
Expected<std::map<std::string, std::int64_t>> parseDims(const std::vector<std::string>& dims);

// --schedule KIND for the distributed runners (cleave run --distributed, cleave train).
void addScheduleOption(CLI::App& app, std::optional<pipeline::ScheduleKind>& kind, const std::string& help);

} // namespace cleave::cli
