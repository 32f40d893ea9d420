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
#include "runtime/model/host_backend.h"

namespace cleave::cli {

struct TrainFlags {
  std::string path, dataPath, wholeModelPath;
  std::string backend = runtime::kHostBackend;
  std::string transport = "auto"; // how ranks talk: auto, gloo or nccl (runtime/distributed/transport.h)
  std::int64_t steps = 1;
  std::vector<double> betas;
  runtime::TrainOptions options;
  std::optional<pipeline::ScheduleKind> schedule;
  OutputDirectoryFlags output;
  bool json = false, timing = false, skipNonFinite = false;
  io::FixedPatterns fixedPatterns; // --frozen / --trainable (a model; a plan records its own)
  // Checkpoints: where, how often, where from, and where to stop.
  runtime::distributed::CheckpointSchedule checkpoints;
  std::uint64_t seed = 0;
  std::optional<int> pipelineRanks; // data x pipeline parallel: ranks per replica (default: all)
  // Token data (runtime/training/training_data.h): --tokens names the ids' format.
  std::string tokens, sampling = "random";
  std::vector<std::string> tokenInputs;
  std::optional<std::int64_t> seqLen;
  // Held-out loss, the JSONL log and how often a step prints.
  std::string evalDataPath, logPath;
  std::int64_t evalEvery = 0, evalBatches = 4;
  std::optional<std::int64_t> printEvery;

  std::optional<runtime::TokenDataOptions> tokenOptions() const {
    if (tokens.empty())
      return std::nullopt;
    return runtime::TokenDataOptions{*runtime::kTokenFormats.parse(tokens), *runtime::kSamplings.parse(sampling), seed,
                                     tokenInputs, seqLen};
  }
  // --print-every; else every step under --json or up to 100 steps; beyond, about 50 lines a run.
  std::int64_t printInterval() const { return printEvery.value_or(json || steps <= 100 ? 1 : (steps + 49) / 50); }
};


void describeTrain(CLI::App& app, TrainFlags& flags);
// The request the flags make; its output is opened by the caller (openOutput).
runtime::distributed::TrainingRequest trainingRequest(const TrainFlags& flags);

} // namespace cleave::cli
