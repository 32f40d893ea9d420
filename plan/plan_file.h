// plan/plan_file.h - plan.json as data: the one reader and the one writer of the format
// (docs/plan-json.md), so every consumer (the runtime, the distributed runner, tests) reads a plan
// the same way and nobody parses plan.json by hand.
//
// Guarantees of readPlan:
//  - the schema is "cleave.plan" and the version one this build knows; anything else is refused
//    naming both;
//  - verifyPlanFile holds: submodule names are unique, every submodule input comes from a graph
//    input or from an earlier submodule that lists it among its outputs (so the plan is acyclic and
//    runs in file order), every plan output is made by the submodule it names;
//  - every submodule file lies inside the plan's folder (symbolic links followed);
//  - formatPlanFile(readPlan(dir)) reproduces plan.json byte for byte (extra top-level keys, such as
//    a split's settings or a partition's devices, are kept in order).
// Cost: linear in the size of plan.json.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/expected.h"
#include "plan/plan.h"
#include "base/json.h"

namespace cleave::plan {

inline constexpr const char* kPlanSchema = "cleave.plan";
inline constexpr int kPlanSchemaVersion = 2; // 2: one submodule list with roles and devices

struct PlanFileInput {
  std::string value;
  std::string from; // "input" (a graph input) or the name of the submodule that makes it
  friend bool operator==(const PlanFileInput&, const PlanFileInput&) = default;
};

// A value that crosses the plan's seams (a graph input, a boundary between submodules, a graph
// output), described so that a consumer can allocate it without the model: what
// report::valueJson writes.
struct PlanFileDim {
  std::int64_t extent = -1; // >= 0: static
  std::string symbol;       // a named symbolic dim; neither: unknown
  friend bool operator==(const PlanFileDim&, const PlanFileDim&) = default;
};
struct PlanFileValue {
  std::string name;
  std::string kind;  // "tensor", "sequence", ... (ir::valueKindName)
  std::string dtype; // tensors: "f32", ... (ir::dtypeName)
  bool rankKnown = false;
  std::vector<PlanFileDim> shape;
  std::int64_t bytes = -1; // -1: unknown
  friend bool operator==(const PlanFileValue&, const PlanFileValue&) = default;
};

struct PlanFileSubmodule {
  std::string name;
  SubmoduleRole role = SubmoduleRole::Cpu;
  std::vector<std::int64_t> devices; // logical device ids (partitions), else empty
  std::string file; // the submodel, relative to the plan's folder; empty for FX plans
  std::vector<PlanFileInput> inputs;
  std::vector<std::string> outputs;
  std::vector<std::string> nodes;
  friend bool operator==(const PlanFileSubmodule&, const PlanFileSubmodule&) = default;
};

struct PlanFile {
  PlanKind kind = PlanKind::Split;
  std::string model;
  std::vector<PlanFileSubmodule> submodules; // execution order
  std::vector<PlanFileInput> outputs;        // the graph's outputs and where each comes from
  std::vector<PlanFileValue> values;         // every value named above, once, in first-seen order
  Json extra = Json::object(); // other top-level keys, in file order
  friend bool operator==(const PlanFile&, const PlanFile&) = default;
};

// The description of `value` for plan.json.
PlanFileValue describeValue(const ir::Graph& graph, ir::ValueId value);

// Fails: InvalidGraph naming the submodule and value that break the guarantees above.
[[nodiscard]] Status verifyPlanFile(const PlanFile& plan);

// Parses plan.json text; `dir` is the plan's folder (submodule files must lie inside it) and
// `source` names the file in messages. Fails: ParseError (not JSON, not a plan, a field of the
// wrong type), Unsupported (another schema version), InvalidArgument (a file outside the
// folder), InvalidGraph (verifyPlanFile).
[[nodiscard]] Expected<PlanFile> parsePlanFile(std::string_view text, const std::string& dir,
                                               const std::string& source);
// Reads DIR/plan.json (parsePlanFile).
[[nodiscard]] Expected<PlanFile> readPlan(const std::string& dir);

// plan.json text: two-space indented JSON and a final newline.
std::string formatPlanFile(const PlanFile& plan);

// A partition plan's "device_backends" (written when its devices file names backends): logical
// device id -> the runtime backend its partitions run on; empty when absent. `dir` names the plan
// in messages. Fails: ParseError (not an object of integer ids to names).
[[nodiscard]] Expected<std::map<std::int64_t, std::string>> deviceBackends(const PlanFile& plan, const std::string& dir);

// DIR/plan.json exists (DIR is a plan directory).
bool isPlanDirectory(const std::string& path);

} // namespace cleave::plan
