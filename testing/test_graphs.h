// testing/test_graphs.h - compact graph construction for tests: one line per node.
//
//   TestGraph g;
//   g.input("x").param("w", {4, 4}).op("MatMul", "mm", {"x", "w"}).op("Relu", "r", {"mm"});
//   Graph graph = g.output({"r"}).build();
//
// Every value is f32[4,4] unless a node says otherwise; node and value share the name.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/builder.h"

namespace cleave::testing {

class TestGraph {
public:
  explicit TestGraph(ir::SourceFormat format = ir::SourceFormat::Onnx) : builder_(format) {
    builder_.modelInfo().opsetImports = {{"", 17}};
    builder_.modelInfo().irVersion = 8;
  }
  TestGraph& input(const std::string& name, std::vector<std::int64_t> dims = {4, 4}) {
    builder_.addInput(name, ir::ValueType::tensor(ir::DType::F32, std::move(dims)));
    return *this;
  }
  // A parameter whose every byte is 1 (a tiny float): for tests where its numbers do not matter.
  TestGraph& param(const std::string& name, std::vector<std::int64_t> dims = {4, 4}) {
    std::int64_t count = 1;
    for (std::int64_t d : dims)
      count *= d;
    return paramBytes(name, std::move(dims), std::string(static_cast<std::size_t>(count * 4), '\1'));
  }
  // A parameter holding `values` (row-major; their count must match `dims`): for tests whose
  // numbers matter (training).
  TestGraph& param(const std::string& name, std::vector<std::int64_t> dims, const std::vector<float>& values) {
    return paramBytes(name, std::move(dims),
                      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  }
  // A second name for the tensor of the parameter `of` (added before), as ONNX writes
  // Identity(initializer).
  TestGraph& alias(const std::string& name, const std::string& of) {
    if (!builder_.addParameterAlias(name, of, name + "_identity"))
      ADD_FAILURE() << "no parameter '" << of << "' to alias";
    return *this;
  }
  TestGraph& op(const std::string& opType, const std::string& name, std::vector<std::string> inputs,
                std::vector<std::int64_t> dims = {4, 4}) {
    ir::NodeSpec spec;
    spec.opType = opType;
    spec.name = name;
    spec.inputs = std::move(inputs);
    spec.outputs.push_back({name, ir::ValueType::tensor(ir::DType::F32, std::move(dims))});
    builder_.addNode(spec);
    return *this;
  }
  TestGraph& node(ir::NodeSpec spec) {
    builder_.addNode(spec);
    return *this;
  }
  TestGraph& output(std::vector<std::string> names) {
    builder_.setOutputs(std::move(names));
    return *this;
  }
  Expected<ir::Graph> finish() { return std::move(builder_).finish(); }
  // Builds and fails the test (returning an empty graph) when the builder refuses.
  ir::Graph build() {
    Expected<ir::Graph> graph = finish();
    if (!graph) {
      ADD_FAILURE() << "graph did not build: " << graph.error().message();
      ir::GraphBuilder empty;
      empty.setOutputs({});
      return std::move(*std::move(empty).finish());
    }
    return std::move(*graph);
  }

private:
  TestGraph& paramBytes(const std::string& name, std::vector<std::int64_t> dims, const std::string& bytes) {
    ir::Parameter p;
    p.name = name;
    p.dtype = ir::DType::F32;
    p.dims = dims;
    p.bytes = static_cast<std::int64_t>(bytes.size());
    p.data = builder_.appendInlineData(bytes);
    builder_.addParameter(std::move(p), ir::ValueType::tensor(ir::DType::F32, std::move(dims)));
    return *this;
  }

  ir::GraphBuilder builder_;
};

} // namespace cleave::testing
