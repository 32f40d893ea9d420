// cli/options.h - option groups every subcommand shares, declared once: the MODEL argument,
// --json, the output directory (-o, --force, --plan-only), enum-valued options fed by one
// EnumTable, and writing a plan directory with its reports. The output directory is checked
// (base/output_directory.h) before any work starts, so a refused `-o` costs the user nothing.
// Complexity: declaring is O(options); writing a plan directory is linear in what it writes.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/enum_table.h"
#include "base/json.h"
#include "base/output_directory.h"
#include "cli/commands.h"
#include "plan/materialize.h"

namespace cleave::cli {

// MODEL: an ONNX file or FX-graph JSON (required, positional).
void addModelInput(CLI::App& app, std::string& path);
// --json: print the JSON summary instead of text.
void addJsonFlag(CLI::App& app, bool& json);

// A floating-point option's value must be a finite number: CLI11 reads "nan" and "inf", and its
// range checks let NaN through (every comparison with it is false). Chained before those.
extern const CLI::Validator kFinite;

struct OutputDirectoryFlags {
  std::string path;
  bool force = false;
  bool planOnly = false; // with addPlanOutput
};

// Adds `-o,--output DIR` (described by `what`) and `--force`.
CLI::Option* addOutputDirectory(CLI::App& app, OutputDirectoryFlags& flags, const std::string& what);
// addOutputDirectory plus --plan-only (plan.json and reports, no submodels).
CLI::Option* addPlanOutput(CLI::App& app, OutputDirectoryFlags& flags);

// Nothing when no -o was given; else the opened (staged) output directory. `inputs` are the run's
// input files, which the directory may not hold.
Expected<std::optional<OutputDirectory>> openOutputDirectory(const OutputDirectoryFlags& flags,
                                                             std::vector<std::string> inputs);

// An option whose value is one of `table`'s names; --help lists them, anything else is a usage
// error naming the choices.
template <typename E, std::size_t N>
CLI::Option* addEnumOption(CLI::App& app, const std::string& name, E& value, const EnumTable<E, N>& table,
                           const std::string& help) {
  std::string described = help + " (" + table.choices() + "; default " + std::string(table.name(value)) + ")";
  std::string what = name.substr(name.find_first_not_of('-')); // "--mode" -> "mode"
  CLI::Validator known(
      [&table, what](std::string& text) -> std::string {
        return table.parse(text) ? std::string() : "unknown " + what + " '" + text + "' (" + table.choices() + ")";
      },
      table.choices());
  return app
      .add_option_function<std::string>(
          name, [&value, &table](const std::string& text) { value = *table.parse(text); }, described)
      ->check(known);
}

// What a pass writes beside its plan: report.txt and report.json, keys for plan.json, more files.
struct PlanReport {
  std::string text;
  std::string json; // the report's JSON text (dumpJson's form): report.json, and what --json prints
  Json planExtra = Json::object();
  std::vector<std::pair<std::string, std::string>> moreFiles; // (file name, contents)
  std::vector<std::pair<ir::ValueId, std::uint32_t>> transmitted; // plan::MaterializeOptions
};

// Writes the plan directory (plan.json, submodels unless --plan-only, the reports) into `dir`
// and commits it.
Status writePlanDirectory(const ir::Graph& graph, const plan::CutPlan& plan, const std::string& modelPath,
                          const OutputDirectoryFlags& flags, OutputDirectory& dir, PlanReport report);

// The end of a plan-writing command: writePlanDirectory when -o opened a directory, then prints
// the report (its JSON with --json, else its text).
Status writePlanAndPrint(const ir::Graph& graph, const plan::CutPlan& plan, const std::string& modelPath,
                         const OutputDirectoryFlags& flags, std::optional<OutputDirectory>& dir, PlanReport report,
                         bool json, std::ostream& out);

} // namespace cleave::cli
