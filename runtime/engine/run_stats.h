// runtime/engine/run_stats.h - what a model's run measured, as typed records free of torch's
// headers, so that report/ renders them (CMake's core-include check lists this header): an
// executor's statistics and a cut model's per-submodule times.
// Guarantees: plain values; nothing here runs or allocates beyond its members.
// Complexity: O(1) to copy but for the per-op and per-node maps.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace cleave::runtime {

struct RunStats {
  // Live values other than parameters at their peak within one executor run (the largest over the
  // runs sharing these stats: a cut model's submodels; what a cut holds between them is not counted).
  std::int64_t peakActivationBytes = 0;
  bool profileOps = false;              // in: time every kernel
  std::map<std::string, double> secondsByOp;   // out with profileOps: kernel seconds per op type
  std::map<std::string, double> secondsByNode; // out with profileOps: kernel seconds per node name
  // Copies between host and device memory (value_placement.h), and their bytes: the crossings of
  // values ops made, and the first copy of each parameter or constant (kept after it).
  std::int64_t hostDeviceCopies = 0, hostDeviceCopyBytes = 0;
  // The same copies by what crossed: "VALUE (made by NODE) to the device" (or "to the host") ->
  // how many times, so that a copy a run should not make is named.
  std::map<std::string, std::int64_t> copiesByValue;
  // Of hostDeviceCopies, those control-flow bodies (Loop, Scan, If) made, every iteration's.
  std::int64_t hostDeviceCopiesInBodies = 0;
  // out with profileOps: a cut model's moves of values between submodules on different devices
  // (its seams, what split --preview predicts), their bytes and their time (each device waited
  // for before and after, so that the time is the copies' own).
  std::int64_t seamCopies = 0, seamCopyBytes = 0;
  double seamCopySeconds = 0.0;
};

// One submodule's (or a whole model's) time in a run, and the backend it ran on.
struct SubmoduleTiming {
  std::string name;
  std::string backend;
  double seconds = 0.0;
};

} // namespace cleave::runtime
