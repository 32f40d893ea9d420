// runtime/distributed/training_run.h - a whole training run, as `cleave train` runs it and a C++
// program (or a Python binding) can: a model in one process, or a plan's stages in this process or
// on this rank's share of `cleave launch`'s ranks (one pipeline over every rank, or replicas of a
// pipeline side by side), from checking the request through resuming, connecting, every step
// (runtime/training/step_loop.h), held-out losses and checkpoints to writing what trained.
//
// Guarantees: everything the request names is checked before any rank connects, so a bad input
// fails on every rank alike in one line (usage errors as ErrorCode::Usage); the observer sees the
// same records on every rank (rank 0 prints them); nothing is written into the output until every
// step is done, and only by the rank that writes (rank 0, its replica's parameters being everyone's).
// The process's allocator stays the caller's choice (`cleave train` keeps freed host memory
// resident: runtime/engine/host_memory.h); the run seeds ATen's generators with options.seed.
// Complexity: the steps' (train.h, pipeline_train.h), plus loading the model or plan once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "base/expected.h"
#include "io/fixed_parameters.h"
#include "pipeline/schedule.h"
#include "runtime/distributed/checkpoint_schedule.h"
#include "runtime/training/step_record.h"
#include "runtime/training/train.h"
#include "runtime/training/trainable_set.h"
#include "runtime/training/training_data.h"
#include "runtime/model/host_backend.h"

namespace cleave::runtime::distributed {

struct TrainingRequest {
  std::string model;          // an ONNX model exported with its loss, or a plan directory
  std::string wholeModel;     // plans: the model the plan was cut from (its trained.onnx is written too)
  std::string data, evalData; // --data, --eval-data ("" none)
  // Rows a program already holds (training_data.h: tensorRows), in place of `data` / `evalData`.
  std::shared_ptr<const TrainingData> dataRows, evalRows;
  std::optional<TokenDataOptions> tokens; // token streams (training_data.h); none: tensors
  TrainOptions options;       // options.lrSchedule.steps is set from `steps`
  std::int64_t steps = 1, evalEvery = 0, evalBatches = 4;
  std::string backend = kHostBackend;
  std::string transport = "auto";
  std::optional<pipeline::ScheduleKind> schedule;
  std::optional<int> pipelineRanks;
  CheckpointSchedule checkpoints;
  io::FixedPatterns fixedPatterns; // a model's --frozen / --trainable
  bool timing = false;             // gather each step's timing (collective for a plan)
  // Opens the output on the rank that writes it, once the request is checked: the folder to write
  // trained.onnx (and a plan's stages) into, "" for none. Null: nothing is written.
  std::function<Expected<std::string>()> openOutput;
  // The output's final place ("" none): checkpoints inside it are refused, and a plan's ranks send
  // their trained stages to rank 0 when there is one.
  std::string outputPath;
};

// What a run tells its observer: before the first step, every step, and at its end.
struct TrainingStart {
  int rank = 0, pipelineRanks = 1;
  std::int64_t firstStep = 0; // 0, or the step a resume continues from
  const TrainableSet& trainable;
  const TrainingData& data;
  const TrainingData* evalData = nullptr;
};

struct TrainingEnd {
  int rank = 0;
  std::int64_t steps = 0, skipped = 0; // run by this process, and skipped (NonFinitePolicy::Skip)
  std::string trained;                 // a plan's rank: "rank 3 of 4 (...): trained submod_1 submod_3"
};

class TrainingObserver {
public:
  virtual ~TrainingObserver() = default;
  virtual Status started(const TrainingStart& start) = 0;
  virtual Status stepped(const StepRecord& record) = 0;
  virtual void ended(const TrainingEnd& end) = 0;
};

// Runs the request: a plan directory's stages, or a model. `notes` gets what a run says on the
// way (a resume's "resumed from ..."). Fails: usage errors (flags that do not go together, as
// ErrorCode::Usage), what loading, the data, the trainers and the steps fail with.
Status runTraining(TrainingRequest request, TrainingObserver& observer, std::ostream& notes);

} // namespace cleave::runtime::distributed
