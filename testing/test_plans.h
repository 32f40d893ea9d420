// testing/test_plans.h - files for tests that run or train models and plans: a scratch folder of
// the test's own (removed with it), and a model written and cut into a pipeline plan on disk as
// `cleave pipeline -o` writes it.
// Complexity: the pipeline pass's and the writer's.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "base/json.h"
#include "base/output_directory.h"
#include "io/onnx.h"
#include "pipeline/stages.h"
#include "plan/materialize.h"

namespace cleave::testing {

// A folder under the system's temporary one, named by `name` and the process, empty at first.
class ScratchDir {
public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
  std::filesystem::path path_;
};

// Writes `graph` to `modelPath` and its `stages`-stage pipeline plan into `planDir`.
inline void writePipelinePlan(const ir::Graph& graph, const std::string& modelPath, const std::string& planDir,
                              std::uint32_t stages) {
  ASSERT_TRUE(io::writeOnnx(graph, modelPath));
  pipeline::PipelineOptions options;
  options.stages = stages;
  Expected<pipeline::PipelinePlan> cut = pipeline::planPipeline(graph, options);
  ASSERT_TRUE(cut) << cut.error().message();
  Expected<OutputDirectory> out = OutputDirectory::open(planDir, {});
  ASSERT_TRUE(out) << out.error().message();
  plan::MaterializeOptions write;
  write.transmitted = cut->transmitted;
  ASSERT_TRUE(plan::materialize(graph, cut->plan, modelPath, *out, Json::object(), write));
}

} // namespace cleave::testing
