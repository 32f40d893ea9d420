#include "cli/options.h"

#include <cmath>
#include <cstdlib>

namespace cleave::cli {

void addModelInput(CLI::App& app, std::string& path) {
  app.add_option("MODEL", path, "ONNX file, FX-graph JSON or torch.export .pt2")->required();
}

const CLI::Validator kFinite(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const double value = std::strtod(text.c_str(), &end);
      return std::isfinite(value) ? std::string() : "'" + text + "' is not a finite number";
    },
    "FINITE");

void addJsonFlag(CLI::App& app, bool& json) { app.add_flag("--json", json, "print a JSON summary"); }

CLI::Option* addOutputDirectory(CLI::App& app, OutputDirectoryFlags& flags, const std::string& what) {
  CLI::Option* option =
      app.add_option("-o,--output", flags.path,
                     what + " (written whole or not at all; an existing DIR is replaced only if it is empty "
                            "or an earlier cleave output)");
  app.add_flag("--force", flags.force,
               "replace -o DIR even if it holds files cleave did not write (never '.', '..', '/', the "
               "home folder or a folder holding an input)");
  return option;
}

CLI::Option* addPlanOutput(CLI::App& app, OutputDirectoryFlags& flags) {
  CLI::Option* option = addOutputDirectory(app, flags, "output directory");
  app.add_flag("--plan-only", flags.planOnly, "write plan.json and reports, no submodels")->needs(option);
  return option;
}

Expected<std::optional<OutputDirectory>> openOutputDirectory(const OutputDirectoryFlags& flags,
                                                             std::vector<std::string> inputs) {
  if (flags.path.empty())
    return std::optional<OutputDirectory>();
  OutputDirectoryOptions options{.force = flags.force, .inputs = std::move(inputs)};
  CLEAVE_TRY(OutputDirectory directory, OutputDirectory::open(flags.path, options));
  return std::optional<OutputDirectory>(std::move(directory));
}

Status writePlanDirectory(const ir::Graph& graph, const plan::CutPlan& plan, const std::string& modelPath,
                          const OutputDirectoryFlags& flags, OutputDirectory& dir, PlanReport report) {
  plan::MaterializeOptions options;
  options.writeSubmodels = !flags.planOnly;
  options.transmitted = std::move(report.transmitted);
  options.extraFiles = {{"report.txt", std::move(report.text)}, {"report.json", std::move(report.json)}};
  for (auto& file : report.moreFiles)
    options.extraFiles.push_back(std::move(file));
  return plan::materialize(graph, plan, modelPath, dir, report.planExtra, options);
}

Status writePlanAndPrint(const ir::Graph& graph, const plan::CutPlan& plan, const std::string& modelPath,
                         const OutputDirectoryFlags& flags, std::optional<OutputDirectory>& dir, PlanReport report,
                         bool json, std::ostream& out) {
  std::string printed = json ? report.json : report.text;
  if (dir)
    CLEAVE_CHECK(writePlanDirectory(graph, plan, modelPath, flags, *dir, std::move(report)));
  out << printed;
  return {};
}

} // namespace cleave::cli
