// cli/train_flags.h - `cleave train`'s command line: its flags, their help, and the training
// request they make (runtime/distributed/training_run.h). Complexity: O(flags).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/options.h"
#include "io/onnx.h"
#include "pipeline/schedule.h"
#include "runtime/distributed/training_run.h"

namespace cleave::cli {

// What the runtime runs (the request) and what only the command line has: how the flags spell
// the optimizer's betas, the non-finite policy and token data, what prints and where it logs.
struct TrainFlags {
  runtime::distributed::TrainingRequest request; // the flags bind into it; trainingRequest completes it
  std::vector<double> betas;                     // --betas B1,B2
  bool skipNonFinite = false;
  OutputDirectoryFlags output;
  bool json = false;
  // Token data (runtime/training/training_data.h): --tokens names the ids' format.
  std::string tokens, sampling = "random";
  std::vector<std::string> tokenInputs;
  std::optional<std::int64_t> seqLen;
  std::string seqLens, seqLenPer = "step"; // --seq-lens, --seq-len-per
  std::string rowLengths;                  // --row-lengths
  // The JSONL log and how often a step prints.
  std::string logPath;
  std::optional<std::int64_t> printEvery;

  // --print-every; else every step under --json or up to 100 steps; beyond, about 50 lines a run.
  std::int64_t printInterval() const {
    return printEvery.value_or(json || request.steps <= 100 ? 1 : (request.steps + 49) / 50);
  }
};

void describeTrain(CLI::App& app, TrainFlags& flags);
// The request the flags make: the bound one with the betas, the non-finite policy, token data and
// the output's place filled in; its output is opened by the caller (openOutput). Fails: Usage
// (--seq-lens that is not a list of lengths nor a bucketing rule).
Expected<runtime::distributed::TrainingRequest> trainingRequest(const TrainFlags& flags);

} // namespace cleave::cli
