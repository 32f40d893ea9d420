// runtime/model/trial_result.h - what trying part of a model on a backend found (lower_and_run.h)
// and what the minimizer made of the trials (minimizer.h), as torch-free records that
// report/minimize_report.h renders (CMake's core-include check lists this header).
// Guarantees: plain values; every name below is the one the reports print.
// Complexity: O(1) but for the culprits' node lists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/enum_table.h"
#include "ir/graph.h"

namespace cleave::runtime {

enum class TrialOutcome : std::uint8_t { Passed, LoweringFailed, RunFailed, Mismatch };
inline constexpr auto kTrialOutcomes = enumTable<TrialOutcome>({{TrialOutcome::Passed, "passed"},
                                                               {TrialOutcome::LoweringFailed, "lowering_failed"},
                                                               {TrialOutcome::RunFailed, "run_failed"},
                                                               {TrialOutcome::Mismatch, "mismatch"}});
inline std::string_view trialOutcomeName(TrialOutcome outcome) { return kTrialOutcomes.name(outcome); }

struct TrialResult {
  TrialOutcome outcome = TrialOutcome::Passed;
  std::string message; // the error, or which output disagreed by how much
  double maxAbs = 0.0, maxRel = 0.0; // element-wise: largest |diff| and |diff| / |want|
  double maxScaled = 0.0;            // largest |diff| / (the output's largest |want|)
  bool passed() const { return outcome == TrialOutcome::Passed; }
};

enum class MinimizeMode : std::uint8_t { Sequential, Binary, Accumulate, Block };
inline constexpr auto kMinimizeModes = enumTable<MinimizeMode>({{MinimizeMode::Sequential, "sequential"},
                                                               {MinimizeMode::Binary, "binary"},
                                                               {MinimizeMode::Accumulate, "accumulate"},
                                                               {MinimizeMode::Block, "block"}});

struct Culprit {
  std::vector<ir::NodeId> nodes; // topological order
  TrialResult result;
};

struct MinimizeResult {
  std::vector<Culprit> culprits; // empty: B agrees everywhere
  std::size_t trials = 0;
  bool wholeFails = false; // all candidates together fail
};

} // namespace cleave::runtime
