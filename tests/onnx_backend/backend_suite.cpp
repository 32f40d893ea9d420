// tests/onnx_backend/backend_suite.cpp - ONNX's own backend test suite through cleave's runtime, in
// one process: the cases of the onnx release scripts/setup installs (.onnx-tests).
//
// usage: cleave_onnx_backend_suite DATA_DIR EXPECTED_FAILURES [--write-expected FILE]
//                                  [--separate-host-memory] [SUITE...]
//
// For every case DATA_DIR/SUITE/CASE (model.onnx and test_data_set_N/{input,output}_K.pb): read
// the model, lower it on aten-cpu, feed each data set's inputs to the graph inputs in order and
// compare each output with numpy's allclose rule (rtol 1e-3, atol 1e-7: runtime/model/compare.h). Each
// case runs in a forked child with a time limit, so a crash or a hang is a failed case, not a
// failed run. Prints the pass count per suite (cases refused in one line for an element type ATen
// lacks counted apart: refusedForType), and fails when a case fails that
// EXPECTED_FAILURES ("suite/case<TAB>reason" lines) does not list; listed cases that pass are
// reported so the list can shrink. --write-expected writes the current failures with reasons.
// --separate-host-memory runs each model on an executor that places values by host and device
// memory (runtime/engine/value_placement.h) as a GPU's does, on the CPU: every kernel then reads
// its operands where the placement hands them over, with no GPU needed to check it.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>

#include "base/file_io.h"
#include "base/isolated_call.h"
#include "io/onnx.h"
#include "runtime/model/backend.h"
#include "runtime/model/compare.h"
#include "runtime/model/tensor_files.h"
#include "runtime/engine/kernel.h"
#include "runtime/engine/tensors.h"
#include "runtime/model/host_backend.h"

namespace fs = std::filesystem;
using namespace cleave;

namespace {

constexpr unsigned kCaseSeconds = 60;
bool gSeparateHostMemory = false;

// The case's model as a GPU backend would run it (--separate-host-memory), else lowered on aten-cpu.
using RunCase = std::function<Expected<runtime::TensorMap>(const runtime::TensorMap&)>;

Expected<RunCase> lowerCase(std::shared_ptr<const ir::Graph> graph) {
  if (gSeparateHostMemory) {
    runtime::ExecutorOptions options;
    options.separateHostMemory = true;
    CLEAVE_TRY(std::shared_ptr<runtime::Executor> executor, runtime::Executor::create(std::move(graph), options));
    return RunCase([executor](const runtime::TensorMap& inputs) { return executor->run(inputs); });
  }
  CLEAVE_TRY(std::unique_ptr<runtime::Backend> backend, runtime::makeBackend(runtime::kHostBackend));
  CLEAVE_TRY(std::shared_ptr<runtime::LoweredModule> lowered, backend->lower(std::move(graph)));
  return RunCase([lowered](const runtime::TensorMap& inputs) { return lowered->run(inputs); });
}

// The first line of an error message, without the model's path, so the expected-failures file
// does not depend on where the data lives.
std::string reasonOf(std::string message, const std::string& caseDir) {
  for (std::size_t at; (at = message.find(caseDir)) != std::string::npos;)
    message.replace(at, caseDir.size(), "CASE");
  message = message.substr(0, message.find('\n'));
  for (char& c : message)
    if (c == '\t')
      c = ' ';
  return message.size() > 300 ? message.substr(0, 300) : message;
}

// ONNX 1.13's test data stores bfloat16 tensors as uint16 bit patterns (held widened in int32,
// runtime/engine/tensors.h): where the model declares bf16, take those bits as bf16.
at::Tensor asDeclared(const at::Tensor& tensor, const ir::Graph& graph, ir::ValueId value) {
  if (graph.dtype(value) != ir::DType::BF16 || tensor.scalar_type() != at::kInt)
    return tensor;
  return tensor.bitwise_and(0xFFFF).to(at::kShort).view(at::kBFloat16);
}

// "" when every data set of the case passes, else why not.
std::string runCase(const fs::path& dir) {
  std::string where = dir.string();
  // As the runtime reads a model: ops without a kernel that ONNX defines as functions run as their bodies.
  Expected<ir::Graph> graph = io::readOnnx((dir / "model.onnx").string(), {.expandFunctions = runtime::opsWithoutKernels()});
  if (!graph)
    return reasonOf(graph.error().message(), where);
  auto shared = std::make_shared<const ir::Graph>(std::move(*graph));
  auto lowered = lowerCase(shared);
  if (!lowered)
    return reasonOf(lowered.error().message(), where);
  std::vector<fs::path> sets;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir))
    if (entry.is_directory() && entry.path().filename().string().rfind("test_data_set_", 0) == 0)
      sets.push_back(entry.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty())
    return "no test data sets";
  runtime::ProtoKinds kinds = runtime::containerValues(*shared);
  for (const fs::path& set : sets) {
    std::vector<std::string> names = ir::graphInputNames(*shared);
    // The set's input_N.pb files, read the way `cleave run --inputs DIR` reads them.
    Expected<runtime::TensorMap> inputs = names.empty() ? runtime::TensorMap{} : runtime::readTensors(set.string(), names, kinds);
    if (!inputs)
      return "input: " + reasonOf(inputs.error().message(), where);
    for (ir::NodeId input : shared->inputNodes()) {
      ir::ValueId value = shared->outputs(input)[0];
      if (auto bound = inputs->find(std::string(shared->valueName(value))); bound != inputs->end())
        bound->second = asDeclared(bound->second, *shared, value);
    }
    Expected<runtime::TensorMap> outputs = (*lowered)(*inputs);
    if (!outputs)
      return reasonOf(outputs.error().message(), where);
    std::size_t o = 0;
    for (ir::ValueId value : shared->graphOutputs()) {
      fs::path file = set / ("output_" + std::to_string(o++) + ".pb");
      if (!fs::exists(file))
        continue;
      Expected<std::string> bytes = readFile(file.string());
      std::string name(shared->valueName(value));
      auto kind = kinds.find(name);
      Expected<at::Tensor> expected =
          bytes ? runtime::valueFromProto(*bytes, file.filename().string(),
                                          kind == kinds.end() ? runtime::ProtoKind::Tensor : kind->second)
                : Expected<at::Tensor>(std::move(bytes.error()));
      if (!expected)
        return "expected output: " + reasonOf(expected.error().message(), where);
      auto found = outputs->find(name);
      if (found == outputs->end())
        return "no output '" + std::string(shared->valueName(value)) + "'";
      runtime::Comparison comparison = runtime::compareTensors(found->second, asDeclared(*expected, *shared, value));
      if (!comparison.equal)
        return "output '" + std::string(shared->valueName(value)) + "': " + comparison.message;
    }
  }
  return "";
}

// runCase in a child process (base/isolated_call.h): a crash or a hang fails the case, not the run.
std::string runCaseIsolated(const fs::path& dir) {
  std::cout.flush();
  Expected<std::string> reason = runIsolated("the case", [&]() { return runCase(dir); }, kCaseSeconds);
  return reason ? *reason : reasonOf(reason.error().message(), dir.string());
}

std::map<std::string, std::string> readExpected(const std::string& path) {
  std::map<std::string, std::string> expected;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#')
      continue;
    std::size_t tab = line.find('\t');
    expected[line.substr(0, tab)] = tab == std::string::npos ? "" : line.substr(tab + 1);
  }
  return expected;
}

} // namespace

// A case refused in one line for an element type ATen lacks (the reader's sub-byte types, an
// ATen kernel with no 8-bit-float form): counted apart from passes and failures, as issue 61 asks.
bool refusedForType(const std::string& reason) {
  return reason.find(io::kNoAtenType) != std::string::npos ||
         reason.find("not implemented for 'Float8") != std::string::npos;
}

// Run by tests/suite_host.cpp (the executable cleave_onnx_backend_suite), as the runtime is run.
extern "C" int cleave_suite_main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: cleave_onnx_backend_suite DATA_DIR EXPECTED_FAILURES [--write-expected FILE] "
                 "[--separate-host-memory] [SUITE...]\n";
    return 2;
  }
  fs::path data = argv[1];
  std::map<std::string, std::string> expected = readExpected(argv[2]);
  std::string writeTo;
  std::vector<std::string> suites;
  for (int i = 3; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--write-expected" && i + 1 < argc)
      writeTo = argv[++i];
    else if (arg == "--separate-host-memory")
      gSeparateHostMemory = true;
    else
      suites.push_back(arg);
  }
  if (suites.empty())
    suites = {"node", "pytorch-converted", "pytorch-operator", "simple"};
  std::map<std::string, std::string> failures; // suite/case -> reason
  int regressions = 0, passedTotal = 0, failedTotal = 0;
  std::vector<std::string> nowPassing;
  for (const std::string& suite : suites) {
    std::vector<fs::path> cases;
    for (const fs::directory_entry& entry : fs::directory_iterator(data / suite))
      if (fs::exists(entry.path() / "model.onnx"))
        cases.push_back(entry.path());
    std::sort(cases.begin(), cases.end());
    int passed = 0, refused = 0;
    for (const fs::path& dir : cases) {
      std::string name = suite + "/" + dir.filename().string();
      std::string reason = runCaseIsolated(dir);
      if (reason.empty()) {
        ++passed;
        if (expected.count(name))
          nowPassing.push_back(name);
        continue;
      }
      failures[name] = reason;
      refused += refusedForType(reason);
      if (!expected.count(name)) {
        ++regressions;
        std::cout << "FAIL (not expected)  " << name << ": " << reason << "\n";
      }
    }
    passedTotal += passed;
    failedTotal += static_cast<int>(cases.size()) - passed;
    const int counted = static_cast<int>(cases.size()) - refused;
    std::printf("suite %-18s %4d / %4d passed (%.1f%%), %d refused for a type ATen lacks (not counted)\n",
                suite.c_str(), passed, counted, counted == 0 ? 100.0 : 100.0 * passed / counted, refused);
  }
  for (const std::string& name : nowPassing)
    std::cout << "now passes (remove from the expected failures): " << name << "\n";
  if (!writeTo.empty()) {
    std::ofstream out(writeTo);
    out << "# ONNX backend test cases cleave's runtime does not pass yet, with the reason it gave\n"
           "# (tests/onnx_backend/backend_suite.cpp; regenerate with --write-expected).\n";
    for (const auto& [name, reason] : failures)
      out << name << "\t" << reason << "\n";
  }
  std::cout << passedTotal << " cases passed, " << failedTotal << " failed (" << regressions
            << " not in the expected failures)\n";
  return regressions == 0 ? 0 : 1;
}
