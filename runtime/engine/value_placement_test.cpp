// Host and device memory apart (value_placement.h): which nodes the placement puts on the host,
// which reads cross, and that an executor placing values so computes what one without it does,
// copying exactly the planned crossings. On the CPU both sides are the CPU: each crossing is a
// no-op copy, counted all the same (ExecutorOptions::separateHostMemory).
#include "runtime/engine/value_placement.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "io/model_loader.h"
#include "runtime/engine/executor.h"
#include "runtime/engine/executor_test_support.h"

namespace cleave::runtime {
namespace {
using namespace test_support;

// x [B, 12] -> Reshape to [B, 3, 4] with a target computed from Shape(x), then divided by
// float(x's dim 1), a value made on the host that a device op reads: the one crossing.
ir::Graph reshapeByShapeGraph() {
  NodeChain chain({"x"});
  chain.add(spec("Shape", {"x"}, {}, "shape"), "shape");
  chain.add(spec("Constant", {}, {ints("value_ints", {0})}, "first"), "first");
  chain.add(spec("Gather", {"shape", "first"}, {}, "batch"), "batch");
  chain.add(spec("Constant", {}, {ints("value_ints", {3, 4})}, "tail"), "tail");
  chain.add(spec("Concat", {"batch", "tail"}, {integer("axis", 0)}, "target"), "target");
  chain.add(spec("Reshape", {"x", "target"}, {}, "reshape"), "reshaped");
  chain.add(spec("Constant", {}, {ints("value_ints", {1})}, "second"), "second");
  chain.add(spec("Gather", {"shape", "second"}, {}, "width"), "width");
  chain.add(spec("Cast", {"width"}, {integer("to", 1)}, "widthf"), "widthf");
  chain.add(spec("Div", {"reshaped", "widthf"}, {}, "scale"), "scaled");
  chain.add(spec("Relu", {"scaled"}, {}, "relu"), "y");
  Expected<ir::Graph> graph = std::move(chain).finish({"y"});
  EXPECT_TRUE(graph) << (graph ? "" : graph.error().message());
  return std::move(*graph);
}

ir::NodeId nodeNamed(const ir::Graph& g, std::string_view name) {
  for (std::uint32_t n = 0; n < g.numNodes(); ++n)
    if (g.name(ir::NodeId{n}) == name)
      return ir::NodeId{n};
  ADD_FAILURE() << "no node " << name;
  return ir::NodeId{0};
}

std::unique_ptr<Executor> makeExecutor(std::shared_ptr<const ir::Graph> graph, bool apart, bool fuse = true,
                                       bool memo = true) {
  ExecutorOptions options;
  options.separateHostMemory = apart;
  options.optimizations.fusion = fuse;
  options.optimizations.rememberShapeArithmetic = memo;
  Expected<std::unique_ptr<Executor>> executor = Executor::create(std::move(graph), options);
  EXPECT_TRUE(executor) << (executor ? "" : executor.error().message());
  return executor ? std::move(*executor) : nullptr;
}

TEST(ValuePlacement, ShapeArithmeticRunsOnTheHostAndComputeOnTheDevice) {
  auto graph = std::make_shared<const ir::Graph>(reshapeByShapeGraph());
  auto executor = makeExecutor(graph, true);
  ASSERT_TRUE(executor && executor->placement());
  const ValuePlacement& placement = *executor->placement();
  for (const char* host : {"shape", "first", "batch", "tail", "target", "second", "width", "widthf"})
    EXPECT_EQ(placement.nodeSide[nodeNamed(*graph, host)], Side::Host) << host;
  for (const char* device : {"reshape", "scale", "relu"})
    EXPECT_EQ(placement.nodeSide[nodeNamed(*graph, device)], Side::Device) << device;
  // The Reshape reads its target on the host, where it was made: only the Div's read crosses.
  std::vector<Crossing> crossings = crossingReads(*graph, executor->kernels(), placement);
  ASSERT_EQ(crossings.size(), 1u);
  EXPECT_EQ(crossings[0].reader, nodeNamed(*graph, "scale"));
  EXPECT_EQ(crossings[0].operand, 1u);
}

// The crossing is copied on the first run; later runs whose host value is the same reuse that
// copy (small_op_memo.h): the value is x's width, 12 in every run while the rows change.
TEST(ValuePlacement, AnExecutorCopiesACrossingWhenItsValueChangesAndComputesTheSame) {
  auto graph = std::make_shared<const ir::Graph>(reshapeByShapeGraph());
  auto apart = makeExecutor(graph, true);
  auto together = makeExecutor(graph, false);
  ASSERT_TRUE(apart && together);
  EXPECT_EQ(together->placement(), nullptr);
  struct Run {
    std::vector<std::int64_t> shape;
    std::int64_t copies;
  };
  for (const Run& run : {Run{{5, 12}, 1}, Run{{5, 12}, 0}, Run{{7, 12}, 0}}) {
    TensorMap inputs{{"x", at::randn(run.shape)}};
    RunStats stats, plain;
    Expected<TensorMap> a = apart->run(inputs, &stats), b = together->run(inputs, &plain);
    ASSERT_TRUE(a && b);
    EXPECT_TRUE(at::equal(a->at("y"), b->at("y")));
    EXPECT_EQ(a->at("y").sizes().vec(), (std::vector<std::int64_t>{run.shape[0], 3, 4}));
    EXPECT_EQ(stats.hostDeviceCopies, run.copies) << "rows " << run.shape[0];
    EXPECT_EQ(stats.hostDeviceCopyBytes, 4 * run.copies) << "rows " << run.shape[0]; // one float
    EXPECT_EQ(plain.hostDeviceCopies, 0);
  }
}

// Without the memo (--no-shape-memo's setting), every run copies its crossings.
TEST(ValuePlacement, WithoutTheMemoEveryRunCopiesItsCrossings) {
  auto graph = std::make_shared<const ir::Graph>(reshapeByShapeGraph());
  ExecutorOptions options;
  options.separateHostMemory = true;
  options.optimizations.rememberShapeArithmetic = false;
  Expected<std::unique_ptr<Executor>> executor = Executor::create(graph, options);
  ASSERT_TRUE(executor) << executor.error().message();
  for (int run = 0; run < 2; ++run) {
    RunStats stats;
    ASSERT_TRUE((*executor)->run({{"x", at::randn({5, 12})}}, &stats));
    EXPECT_EQ(stats.hostDeviceCopies, 1) << "run " << run;
  }
}

// Shape arithmetic through ops outside the list (Range here, as Swin's masks use Range,
// ConstantOfShape and Expand) still runs on the host when it reads only host values and only the
// host reads it: nothing crosses.
TEST(ValuePlacement, ChainsOnlyTheHostReadsRunOnTheHost) {
  NodeChain chain({"x"});
  chain.add(spec("Shape", {"x"}, {}, "shape"), "shape");
  chain.add(spec("Constant", {}, {integer("value_int", 0)}, "start"), "start");
  chain.add(spec("Constant", {}, {integer("value_int", 2)}, "limit"), "limit");
  chain.add(spec("Constant", {}, {integer("value_int", 1)}, "delta"), "delta");
  chain.add(spec("Range", {"start", "limit", "delta"}, {}, "range"), "range"); // [0, 1]
  chain.add(spec("Constant", {}, {integer("value_int", 0)}, "zero"), "zero");
  chain.add(spec("Mul", {"range", "zero"}, {}, "mul"), "zeros");
  chain.add(spec("Add", {"zeros", "shape"}, {}, "add"), "target"); // x's shape again
  chain.add(spec("Reshape", {"x", "target"}, {}, "reshape"), "y");
  Expected<ir::Graph> built = std::move(chain).finish({"y"});
  ASSERT_TRUE(built) << built.error().message();
  auto graph = std::make_shared<const ir::Graph>(std::move(*built));
  auto executor = makeExecutor(graph, true);
  ASSERT_TRUE(executor);
  for (const char* host : {"range", "mul", "add"})
    EXPECT_EQ(executor->placement()->nodeSide[nodeNamed(*graph, host)], Side::Host) << host;
  EXPECT_TRUE(crossingReads(*graph, executor->kernels(), *executor->placement()).empty());
  RunStats stats;
  const at::Tensor x = at::randn({2, 6});
  Expected<TensorMap> out = executor->run({{"x", x}}, &stats);
  ASSERT_TRUE(out);
  EXPECT_TRUE(at::equal(out->at("y"), x));
  EXPECT_EQ(stats.hostDeviceCopies, 0);
}

// A constant read on both sides is copied once per executor, not once per run.
TEST(ValuePlacement, AConstantReadOnBothSidesIsCopiedOnce) {
  NodeChain chain({"x"});
  chain.add(spec("Constant", {}, {ints("value_ints", {1})}, "axis"), "axis");
  chain.add(spec("Unsqueeze", {"x", "axis"}, {}, "unsqueeze"), "wide"); // reads axis on the host
  chain.add(spec("Cast", {"axis"}, {integer("to", 1)}, "axisf"), "axisf"); // host: constant operand
  chain.add(spec("Cast", {"wide"}, {integer("to", 7)}, "widel"), "widel"); // device
  chain.add(spec("Add", {"widel", "axis"}, {}, "add"), "y");             // device read of axis
  Expected<ir::Graph> built = std::move(chain).finish({"y", "axisf"});
  ASSERT_TRUE(built) << built.error().message();
  auto graph = std::make_shared<const ir::Graph>(std::move(*built));
  auto executor = makeExecutor(graph, true);
  ASSERT_TRUE(executor);
  EXPECT_EQ(executor->placement()->nodeSide[nodeNamed(*graph, "axis")], Side::Host);
  EXPECT_EQ(executor->placement()->nodeSide[nodeNamed(*graph, "axisf")], Side::Host);
  TensorMap inputs{{"x", at::arange(6, at::kFloat).reshape({2, 3})}};
  RunStats first, second;
  ASSERT_TRUE(executor->run(inputs, &first));
  Expected<TensorMap> out = executor->run(inputs, &second);
  ASSERT_TRUE(out);
  EXPECT_EQ(first.hostDeviceCopies, 1);
  EXPECT_EQ(second.hostDeviceCopies, 0);
  EXPECT_TRUE(at::equal(out->at("y"), at::arange(6, at::kLong).reshape({2, 1, 3}) + 1));
}

// The example models, and those CLEAVE_PLACEMENT_MODELS names (paths, ':' between; e.g. the zoo
// tests/runtime_oracle_test.py exports to BUILD/zoo_small).
std::vector<std::string> placementModels() {
  std::vector<std::string> paths;
  for (const char* name : {"cnn.onnx", "transformer.onnx", "dlrm.onnx"})
    paths.push_back(std::string(CLEAVE_SOURCE_DIR) + "/examples/" + name);
  if (const char* extra = std::getenv("CLEAVE_PLACEMENT_MODELS"))
    for (std::string_view rest = extra; !rest.empty();) {
      const std::size_t colon = std::min(rest.find(':'), rest.size());
      if (colon > 0)
        paths.emplace_back(rest.substr(0, colon));
      rest.remove_prefix(std::min(colon + 1, rest.size()));
    }
  return paths;
}

// Every such model: placed or not, the same outputs, bit for bit; each unfused run without the
// memo copies what the placement's crossings say (those of values ops make; parameters and
// constants only once; a fused group reads other operands), and with the memo a second run of the
// same inputs copies nothing (the crossings are a few shape-derived numbers, remembered; a copy
// is named by the value it moves); and no crossing is a shape operand read back to the host: the
// shape arithmetic stayed there.
TEST(ValuePlacement, ExampleModelsComputeTheSameWithValuesPlaced) {
  for (const std::string& path : placementModels()) {
    SCOPED_TRACE(path);
    const std::string name = std::filesystem::path(path).filename().string();
    Expected<ir::Graph> loaded = io::loadModel(path);
    ASSERT_TRUE(loaded) << loaded.error().message();
    auto graph = std::make_shared<const ir::Graph>(std::move(*loaded));
    auto apart = makeExecutor(graph, true);
    auto together = makeExecutor(graph, false);
    auto unfused = makeExecutor(graph, true, false, false);
    ASSERT_TRUE(apart && together && unfused);
    Expected<TensorMap> inputs = randomInputs(*graph, 7);
    ASSERT_TRUE(inputs) << inputs.error().message();
    std::size_t hostOps = 0, shapeOps = 0, hostShapeOps = 0;
    for (std::uint32_t n = 0; n < graph->numNodes(); ++n) {
      const ir::NodeId node{n};
      if (graph->kind(node) != ir::NodeKind::Op)
        continue;
      const bool host = apart->placement()->nodeSide[node] == Side::Host;
      hostOps += host ? 1 : 0;
      if (graph->opType(node) == "Shape") {
        ++shapeOps;
        hostShapeOps += host ? 1 : 0;
      }
    }
    EXPECT_EQ(hostShapeOps, shapeOps);
    if (name == "transformer.onnx") // its heads' reshapes read Shape arithmetic
      EXPECT_GT(hostOps, 10u);
    std::int64_t madeEachRun = 0;
    for (const Crossing& crossing : crossingReads(*graph, unfused->kernels(), *unfused->placement())) {
      const ir::NodeId producer = graph->producer(crossing.value);
      const bool invariant = graph->kind(producer) == ir::NodeKind::Parameter ||
                             (graph->kind(producer) == ir::NodeKind::Op && graph->opType(producer) == "Constant");
      madeEachRun += invariant ? 0 : 1;
      EXPECT_FALSE(apart->kernels()[crossing.reader].readsOnHost(crossing.operand))
          << graph->name(crossing.reader) << " reads operand " << crossing.operand << " back from the device";
    }
    // Copies a control-flow body makes count in the run's statistics too (DLRM's EmbeddingBag loop
    // reads its offsets on the host every run), and apart.
    for (int run = 0; run < 2; ++run) {
      RunStats stats, fused;
      Expected<TensorMap> a = apart->run(*inputs, &fused), b = together->run(*inputs), c = unfused->run(*inputs, &stats);
      ASSERT_TRUE(a && b && c);
      for (const auto& [output, tensor] : *b)
        EXPECT_TRUE(at::equal(a->at(output), tensor)) << output;
      const std::int64_t bodyCopies = stats.hostDeviceCopiesInBodies, fusedBodyCopies = fused.hostDeviceCopiesInBodies;
      if (name == "dlrm.onnx")
        EXPECT_GT(bodyCopies, 0);
      if (run == 1) { // the first run also copies each crossing parameter or constant once
        EXPECT_EQ(stats.hostDeviceCopies - bodyCopies, madeEachRun);
        std::cout << name << ": " << hostOps << " op nodes on the host, " << madeEachRun << " copies a run ("
                  << fused.hostDeviceCopies - fusedBodyCopies << " fused), " << bodyCopies << " in bodies\n";
      }
      if (run == 1) { // small crossings remembered
        EXPECT_EQ(fused.hostDeviceCopies, fusedBodyCopies);
        if (fusedBodyCopies == 0)
          for (const auto& [crossing, count] : fused.copiesByValue)
            ADD_FAILURE() << "copied again: " << crossing;
      } else {
        std::int64_t named = 0;
        for (const auto& [crossing, count] : fused.copiesByValue)
          named += count;
        EXPECT_EQ(named, fused.hostDeviceCopies);
      }
    }
  }
}

} // namespace
} // namespace cleave::runtime
