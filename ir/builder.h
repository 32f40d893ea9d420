// ir/builder.h - the only way to make a Graph.
//
// Readers, generators and tests add nodes in any order, naming values by string; finish() then
//   1. gives unnamed nodes unique names "<opType>_<k>" (k counts in creation order),
//   2. checks that node names and value names are unique,
//   3. resolves every operand to its producer (a name nobody produces is an error),
//   4. orders nodes topologically, keeping the creation order wherever it is already valid,
//      and names a cycle if there is one,
//   5. renumbers nodes and values densely in that order and builds the CSR arrays and users.
// Complexity: O(V + E + total name length) expected time, O(V + E) memory.
// Determinism: the result depends only on the sequence of calls.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace cleave::ir {

struct OutputSpec {
  std::string name;
  ValueType type;
};

struct NodeSpec {
  NodeKind kind = NodeKind::Op;
  std::string name; // empty: generated
  std::string domain;
  std::string opType;
  std::string scope;
  std::vector<std::string> inputs; // value names; "" = omitted optional operand
  std::uint32_t implicitInputs = 0; // how many of the trailing inputs are implicit
  std::vector<OutputSpec> outputs;
  std::vector<Attribute> attributes;
  std::vector<Parameter> parameters; // module weights (FX call_module)
};

class GraphBuilder {
public:
  explicit GraphBuilder(SourceFormat format = SourceFormat::Synthetic);

  ModelInfo& modelInfo() { return info_; }

  // A graph input (placeholder) whose single value has the node's name.
  void addInput(std::string_view name, const ValueType& type);
  // A parameter node (initializer / get_attr) whose single value has the node's name.
  void addParameter(Parameter parameter, const ValueType& type);
  // A parameter node named `aliasName` for the tensor of the parameter node `existingName`
  // (added before): the same bytes under a second name. False when no parameter node has that
  // name yet.
  // `nodeName`: the ONNX Identity node it came from (Parameter::sourceNode).
  bool addParameterAlias(std::string_view aliasName, std::string_view existingName, std::string_view nodeName);
  // Holds the parameter node `name` (added before) and the parameter it aliases fixed in training,
  // for `why` (a reason already given stays). False when no parameter node has that name.
  bool markFixed(std::string_view name, Fixed why);
  // The parameters added so far, in order.
  std::span<const Parameter> parameters() const { return params_; }
  // Inline bytes for a parameter; returns the ParameterData to put in the Parameter.
  ParameterData appendInlineData(std::string_view bytes);
  // Copies what it needs: callers may reuse one NodeSpec for many nodes (no allocations then).
  void addNode(const NodeSpec& spec);
  // The graph outputs, by value name, in order. Required before finish().
  void setOutputs(std::vector<std::string> valueNames, std::string outputNodeName = "output");
  // True when some op output has no type at all (readers then ask for shape inference).
  bool hasUntypedOpOutputs() const;
  void reserve(std::size_t nodes, std::size_t values);
  // The file that ModelFile parameters point into; the graph keeps it mapped.
  void setModelFile(std::shared_ptr<const MappedFile> file) { modelFile_ = std::move(file); }
  // The builder's string ids: readers may key side tables by them (ids are stable).
  std::uint32_t intern(std::string_view text) { return strings_.intern(text); }
  std::uint32_t findString(std::string_view text) const { return strings_.find(text); }

  [[nodiscard]] Expected<Graph> finish() &&;

private:
  using PendingNode = Graph::Node;
  Status checkTotalBytes() const;
  struct PendingValue {
    std::uint32_t name;
    ValueKind kind;
    DType dtype;
    bool rankKnown;
    std::uint32_t typeName;
    std::uint32_t producer; // pending node index
    IdRange dims;
    std::int64_t bytes;
  };
  void addPendingValue(std::string_view name, const ValueType& type, std::uint32_t producer);
  // A node with no operands and one output named like the node (inputs and parameters).
  void addSourceNode(NodeKind kind, std::string_view name, const ValueType& type);
  Status nameUnnamedNodes();
  Expected<std::vector<std::uint32_t>> resolveOperands();
  Expected<std::vector<std::uint32_t>> orderTopologically(const std::vector<std::uint32_t>& producerOf);
  std::string describeCycle(const std::vector<std::uint32_t>& stack, std::uint32_t repeated) const;
  // finish()'s last phases: the Output node last (exactly one); nodes, values and operands
  // renumbered into the graph's flat arrays in `order`; users and names indexed.
  static Status placeOutputLast(const std::vector<PendingNode>& nodes, std::vector<std::uint32_t>& order);
  void buildFlatArrays(Graph& graph, const std::vector<std::uint32_t>& order,
                       const std::vector<std::uint32_t>& operandValues);
  static void indexUsers(Graph& graph);
  static void indexNames(Graph& graph);

  ModelInfo info_;
  StringTable strings_;
  std::vector<PendingNode> nodes_;
  std::vector<PendingValue> values_;
  std::vector<std::uint32_t> operandNames_; // CSR of string ids
  std::vector<DimEntry> dims_;
  std::vector<Attribute> attrs_;
  std::vector<Parameter> params_;
  std::vector<std::uint32_t> nodeParams_;
  std::unordered_map<std::uint32_t, std::uint32_t> parameterNodeParam_; // node name id -> param index
  std::string inlineData_;
  std::shared_ptr<const MappedFile> modelFile_;
  bool outputsSet_ = false;
};

} // namespace cleave::ir
