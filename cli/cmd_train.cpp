// cli/cmd_train.cpp - `cleave train MODEL --data FILE --batch B --steps K ...` (flags: cli/train_flags.h):
// parses, hands the request to runtime/distributed/training_run.h, and prints what it reports
// (report/training_report.h) on rank 0, with --log's JSON lines.
#include <fstream>
#include <optional>

#include "base/file_io.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/runtime_library.h"
#include "cli/train_flags.h"
#include "report/training_report.h"
#include "runtime/engine/host_memory.h"

namespace cleave::cli {
namespace {

// Token flags without token data, and a --log that would overwrite an input or land in -o.
Status checkCommandLine(const TrainFlags& flags) {
  if (flags.tokens.empty() && (!flags.tokenInputs.empty() || flags.seqLen || !flags.seqLens.empty() || flags.sampling != "random"))
    return usageError() << (flags.seqLen ? "--seq-len" : !flags.seqLens.empty() ? "--seq-lens" : !flags.tokenInputs.empty() ? "--token-inputs" : "--sampling")
                        << " is for token data: give --tokens uint16|uint32|npy";
  if (flags.seqLen && !flags.seqLens.empty())
    return usageError() << "--seq-len and --seq-lens: give one length or lengths that change, not both";
  if (!flags.rowLengths.empty() && (flags.tokens.empty() || flags.seqLen || !flags.seqLens.empty()))
    return usageError() << "--row-lengths " << (flags.tokens.empty() ? "is for token data: give --tokens uint16|uint32|npy"
                                                                     : "gives each row its own length: drop --seq-len / --seq-lens");
  if (!flags.rowLengths.empty() && flags.tokens == "npy" && isSameOrInside(flags.rowLengths, flags.request.data))
    return usageError() << "--row-lengths " << flags.rowLengths << " lies in --data's shard folder, where it would be "
                                                                   "read as a shard of ids";
  if (flags.seqLenPer != "step" && flags.seqLens.empty())
    return usageError() << "--seq-len-per goes with --seq-lens";
  if (flags.logPath.empty())
    return {};
  for (const std::string* input : {&flags.request.model, &flags.request.data, &flags.request.evalData, &flags.request.wholeModel})
    if (!input->empty() && isSameOrInside(flags.logPath, *input))
      return usageError() << "--log " << flags.logPath << " would overwrite the input " << *input;
  if (!flags.output.path.empty() && isSameOrInside(flags.logPath, flags.output.path))
    return usageError() << "--log " << flags.logPath << " must be outside -o " << flags.output.path
                        << ": -o replaces its folder whole";
  return {};
}

// Rank 0 prints every --print-every-th step (the first, the last and held-out losses always) and
// logs each; every rank says what it trained on stderr.
class TrainPrinter final : public runtime::distributed::TrainingObserver {
public:
  TrainPrinter(const TrainFlags& flags, std::ostream& out, std::ostream& err) : flags_(flags), out_(out), err_(err) {}

  Status started(const runtime::distributed::TrainingStart& start) override {
    rank_ = start.rank;
    first_ = start.firstStep;
    trainable_ = start.trainable;
    data_ = &start.data;
    evalData_ = start.evalData;
    const auto& schedule = flags_.request.options.lrSchedule;
    style_ = {flags_.json, flags_.request.timing || (!flags_.json && flags_.printInterval() > 1),
              schedule.kind != runtime::LrScheduleKind::Constant || schedule.warmup > 0, flags_.request.timing, flags_.request.steps,
              flags_.printInterval(), start.pipelineRanks};
    if (flags_.logPath.empty() || rank_ != 0)
      return {};
    log_.emplace(flags_.logPath, std::ios::trunc);
    if (!*log_)
      return Error(ErrorCode::IoError) << "--log " << flags_.logPath << ": cannot write";
    return {};
  }

  Status stepped(const runtime::StepRecord& record) override {
    if (rank_ != 0)
      return {};
    const std::int64_t step = record.step, last = flags_.request.checkpoints.lastStep(flags_.request.steps);
    if (step == first_ || step + 1 == last || record.evalLoss || (step + 1) % flags_.printInterval() == 0)
      report::printStep(record, step == first_ ? &trainable_ : nullptr, style_, out_);
    if (log_)
      logStep(record);
    return {};
  }

  void ended(const runtime::distributed::TrainingEnd& end) override {
    if (end.skipped && end.rank == 0)
      err_ << "skipped " << end.skipped << " of " << end.steps << " step(s): loss or gradients not finite\n";
    if (!end.trained.empty())
      err_ << end.trained << "\n";
  }

private:
  // The step's JSON line with its rate and, for token data, its rows' windows and, after a
  // held-out loss, the held-out rows' (the same each time).
  void logStep(const runtime::StepRecord& record) {
    report::StepLineStyle style = style_;
    style.withRate = true;
    Json json = report::stepJson(record, nullptr, style);
    const std::int64_t batch = flags_.request.options.batch;
    if (std::vector<std::int64_t> starts = data_->windowStarts(record.step * batch, batch); !starts.empty())
      json["window_starts"] = std::move(starts);
    if (std::vector<std::int64_t> lengths = data_->windowLengths(record.step * batch, batch); !lengths.empty())
      json["window_lengths"] = std::move(lengths);
    if (record.evalLoss && evalData_)
      if (std::vector<std::int64_t> held = evalData_->windowStarts(0, flags_.request.evalBatches * batch); !held.empty())
        json["eval_window_starts"] = std::move(held);
    *log_ << toJsonText(json) << "\n";
    log_->flush();
  }

  const TrainFlags& flags_;
  std::ostream &out_, &err_;
  int rank_ = 0;
  std::int64_t first_ = 0;
  runtime::TrainableSet trainable_;
  const runtime::TrainingData* data_ = nullptr;
  const runtime::TrainingData* evalData_ = nullptr;
  report::StepLineStyle style_;
  std::optional<std::ofstream> log_;
};

Status train(TrainFlags& flags, std::ostream& out, std::ostream& err) {
  CLEAVE_CHECK(checkCommandLine(flags));
  // Each step frees what the next allocates again: keep it resident rather than fault it back in
  // (the process's choice, so the CLI's, not the runtime API's).
  runtime::keepFreedHostMemory();
  CLEAVE_TRY(runtime::distributed::TrainingRequest request, trainingRequest(flags));
  std::optional<OutputDirectory> output;
  request.openOutput = [&]() -> Expected<std::string> {
    const runtime::distributed::TrainingRequest& given = flags.request;
    CLEAVE_TRY(std::optional<OutputDirectory> opened,
               openOutputDirectory(flags.output, {given.model, given.data, given.evalData, given.wholeModel}));
    if (!opened)
      return std::string();
    output.emplace(std::move(*opened));
    return output->stagingPath();
  };
  TrainPrinter printer(flags, out, err);
  CLEAVE_CHECK(runtime::distributed::runTraining(std::move(request), printer, err));
  return output ? output->commit() : Status{};
}

void describe(CLI::App& app, TrainFlags& flags) { describeTrain(app, flags); }

} // namespace

const CommandBody kTrainBody{"train", parseThenRun<TrainFlags, describe, train>};

} // namespace cleave::cli
