// report/training_report.h - what `cleave train` prints and logs, rendered from the runtime's typed
// records (runtime/training/step_record.h, trainable_set.h: torch-free): what trains and why the
// rest stays fixed, each step's line (text or one JSON line), a plan step's timing across ranks
// (the measured bubble and every action's timeline), and the lines a run ends with.
// Guarantees: a step's JSON line without the rate (`withRate` false) depends on the step's result
// alone, so two runs of the same training print the same bytes.
// Complexity: O(stages x microbatches x log) for a timing; O(1) otherwise.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "base/json.h"
#include "runtime/training/step_record.h"
#include "runtime/training/trainable_set.h"

namespace cleave::report {

// How a run prints its steps.
struct StepLineStyle {
  bool json = false;
  bool withRate = false;    // rows/s (tokens/s), FLOP/s and, printing every N > 1, the time left
  bool scheduledLr = false; // the rate changes over the run: print it
  bool timing = false;      // --timing: the step's milliseconds (and a plan's measurements)
  std::int64_t steps = 0, printInterval = 1;
  int ranks = 1; // a plan's pipeline ranks (the bubble's denominator)
};

// What trains, what stays fixed and why (the first step line's "trainable").
Json trainableJson(const runtime::TrainableSet& set);
// "trains 9 tensor(s) (1.2 MiB); holds 3 fixed: ..." and the advice lines under it.
void printTrainable(const runtime::TrainableSet& set, std::ostream& out);

// A plan step's timing across ranks: wall seconds, per-stage compute and bytes, per-rank waits,
// the measured bubble (1 - compute / (ranks x the schedule's seconds)) and the action timeline.
Json planTimingJson(const runtime::StepTiming& timing, int ranks);

// The step's JSON line; `trainable` with the first line printed.
Json stepJson(const runtime::StepRecord& record, const runtime::TrainableSet* trainable, const StepLineStyle& style);
// The step as --json or text prints it (the trainable set first, when given).
void printStep(const runtime::StepRecord& record, const runtime::TrainableSet* trainable, const StepLineStyle& style,
               std::ostream& out);
// "12 s", "3m05s", "2h07m".
std::string formatEta(double seconds);

} // namespace cleave::report
