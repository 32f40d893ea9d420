// ir/graph.h - cleave's graph IR: an immutable, topologically ordered dataflow graph.
//
// Node kinds mirror torch.fx's six opcodes: Input (placeholder), Parameter (get_attr / ONNX
// initializer), Op (call_function / an ONNX node), ModuleCall (call_module), MethodCall
// (call_method) and Output (one node whose inputs are the graph outputs).
//
// Layout: dense ids and flat arrays. NodeId == position in topological order; a node's operands,
// outputs, attributes and parameters are ranges into shared CSR arrays; each value has exactly
// one producer and a sorted, duplicate-free list of user nodes. Only GraphBuilder::finish()
// creates a Graph (after checking it), so every Graph in cleave satisfies verifyGraph().
// Complexity: GraphBuilder::finish is O(V + E) plus sorting each value's users; every query is
// O(1) or linear in the range it returns.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/enum_table.h"
#include "base/expected.h"
#include "base/ids.h"
#include "base/mapped_file.h"
#include "base/strings.h"
#include "ir/types.h"

namespace cleave::ir {

enum class NodeId : std::uint32_t {};
enum class ValueId : std::uint32_t {};
enum class ParamId : std::uint32_t {};
// An omitted optional operand (ONNX's empty input name).
inline constexpr ValueId kNoValue{UINT32_MAX};

enum class NodeKind : std::uint8_t { Input, Parameter, Op, ModuleCall, MethodCall, Output };
// The FX opcode spelling: placeholder, get_attr, call_function, call_module, call_method, output.
std::string_view nodeKindName(NodeKind kind);

enum class SourceFormat : std::uint8_t { Onnx, Fx, Synthetic };

// A node attribute. ONNX attributes keep their ONNX type; tensor- and graph-valued attributes
// keep their serialized protobuf bytes in `text` (written back unchanged). FX keeps the
// non-node parts of args/kwargs as JSON text (kind Json).
enum class AttrKind : std::uint8_t { Int, Float, String, Ints, Floats, Strings, Tensor, Graph, Json };
struct Attribute {
  std::string name;
  AttrKind kind = AttrKind::Int;
  std::int64_t intValue = 0;
  double floatValue = 0.0;
  std::string text; // String, Json, or serialized Tensor/Graph proto
  std::vector<std::int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  friend bool operator==(const Attribute&, const Attribute&) = default;
};

// Where a parameter's bytes live. Data is read only when asked for (readParameterData).
//   Inline:    the graph's own blob (generated models, ONNX typed-field tensors)
//   ModelFile: inside the model file the graph was read from (ONNX raw_data), via its mapping
//   External:  an ONNX external data file, relative to the model's directory
struct ParameterData {
  enum class Source : std::uint8_t { None, Inline, ModelFile, External };
  Source source = Source::None;
  std::uint64_t offset = 0; // into the inline blob, or into the external file
  std::uint64_t length = 0;
  std::string externalPath; // absolute or relative to the model's directory
  friend bool operator==(const ParameterData&, const ParameterData&) = default;
};

// Why training holds a parameter fixed (Trains: it does not). Which tensors train is the model's
// trainable set: io/ reads it (a Constant, a normalization's running statistic, an FX buffer, the
// list a model's metadata gives: io/fixed_parameters.h) and passes keep it (a folded value is
// fixed), so that a plan trains exactly what the PyTorch module trains.
enum class Fixed : std::uint8_t {
  Trains,
  Constant,         // an ONNX Constant read as a parameter
  RunningStatistic, // a normalization's running mean or variance (updated, never by gradient)
  Buffer,           // a module's registered buffer (FX, or the model's list)
  Frozen,           // a parameter the module does not train (requires_grad=False; --frozen)
  Folded,           // computed from constants by folding (simplify/)
};
inline constexpr auto kFixedReasons = enumTable<Fixed>({{Fixed::Trains, "trains"},
                                                       {Fixed::Constant, "constant"},
                                                       {Fixed::RunningStatistic, "running_statistic"},
                                                       {Fixed::Buffer, "buffer"},
                                                       {Fixed::Frozen, "frozen"},
                                                       {Fixed::Folded, "folded"}});

struct Parameter {
  std::string name; // qualified name (ONNX initializer name, FX attribute path)
  DType dtype = DType::Undefined;
  std::vector<std::int64_t> dims;
  std::int64_t bytes = 0;
  Fixed fixed = Fixed::Trains; // why training holds it fixed, if it does
  bool isBuffer() const { return fixed != Fixed::Trains; } // not trained
  // The name of the parameter whose tensor this is, when one tensor goes by two names (ONNX
  // exporters write the second name as Identity(initializer)); empty for a tensor of its own.
  // `data` points at the same bytes. Passes count and tie the tensor once (Graph::storageOf).
  std::string aliasOf;
  // How an ONNX file wrote it, so writing it back keeps that form: empty for an initializer;
  // else the name of the `Constant` (sourceAttributes: its value attribute) or `Identity` node
  // that io/ read as this parameter.
  std::string sourceNode;
  std::vector<Attribute> sourceAttributes;
  ParameterData data;
  friend bool operator==(const Parameter&, const Parameter&) = default;
};

// Model-level facts kept for round trips and reports.
struct ModelInfo {
  SourceFormat format = SourceFormat::Synthetic;
  std::string graphName;
  std::int64_t irVersion = 0;
  std::vector<std::pair<std::string, std::int64_t>> opsetImports; // (domain, version)
  std::string producerName, producerVersion;
  std::vector<std::pair<std::string, std::string>> metadata;
  std::string sourcePath; // the file it was read from, for external data
  std::int64_t convertedFromOpset = 0; // the ai.onnx opset the file had, when converted on reading
  // The model says which of its tensors are buffers and frozen (FX graphs; an ONNX model's
  // cleave.fixed_parameters list); otherwise the default rule decides (io/fixed_parameters.h).
  bool buffersListed = false;
  // Initializers that onnxscript's optimizer folded (an optimized torch.onnx dynamo export):
  // some may stand for parameters in another form (io/exporter_signature.h).
  std::uint32_t exporterFolds = 0;
  // The parameters the optimizer had merged by value that reading gave their own tensors again.
  std::uint32_t exporterMergesSplit = 0;
  // Why the model cannot train as its module would (merged parameters its notes cannot tell
  // apart); empty when it can. Kept in the models cleave writes (io/fixed_parameters.h).
  std::string untrainable;
};

// A dimension in the flat dims array: extent >= 0, or a symbol id (0 = unnamed unknown).
struct DimEntry {
  std::int64_t extent = -1;
  std::uint32_t symbol = 0;
};

class GraphBuilder;

class Graph {
public:
  // ----- nodes -----
  std::uint32_t numNodes() const { return static_cast<std::uint32_t>(nodes_.size()); }
  NodeKind kind(NodeId node) const { return at(node).kind; }
  std::string_view name(NodeId node) const { return strings_.str(at(node).name); }
  std::string_view opDomain(NodeId node) const { return strings_.str(at(node).domain); }
  // ONNX op_type, FX target as torch's get_node_target spells it, or method name.
  std::string_view opType(NodeId node) const { return strings_.str(at(node).opType); }
  // Dotted module path, e.g. "layer1.0.conv1"; empty at the top level.
  std::string_view scope(NodeId node) const { return strings_.str(at(node).scope); }
  std::uint32_t opTypeId(NodeId node) const { return at(node).opType; }
  // "Conv", "com.microsoft::Gelu": the op type with its domain when not the default one.
  std::string target(NodeId node) const;
  // Operands in order; kNoValue marks an omitted optional operand. Implicit operands
  // (outer-scope values read by a subgraph attribute) come last.
  std::span<const ValueId> inputs(NodeId node) const;
  std::uint32_t numImplicitInputs(NodeId node) const { return at(node).implicitInputs; }
  std::span<const ValueId> outputs(NodeId node) const;
  std::span<const Attribute> attributes(NodeId node) const;
  const Attribute* findAttribute(NodeId node, std::string_view attrName) const;
  // Parameters the node owns: the initializer of a Parameter node, a module's weights.
  std::span<const ParamId> parameters(NodeId node) const;
  // Bytes of the parameters the node owns.
  std::int64_t parameterBytes(NodeId node) const;
  bool isCallable(NodeId node) const; // Op, ModuleCall, MethodCall
  NodeId findNode(std::string_view nodeName) const; // NodeId{UINT32_MAX} when absent
  std::span<const NodeId> inputNodes() const { return inputNodes_; }
  NodeId outputNode() const { return NodeId{numNodes() - 1}; }
  std::span<const ValueId> graphOutputs() const { return inputs(outputNode()); }

  // ----- values -----
  std::uint32_t numValues() const { return static_cast<std::uint32_t>(values_.size()); }
  std::string_view valueName(ValueId value) const { return strings_.str(vat(value).name); }
  NodeId producer(ValueId value) const { return vat(value).producer; }
  std::span<const NodeId> users(ValueId value) const;
  ValueKind valueKind(ValueId value) const { return vat(value).kind; }
  DType dtype(ValueId value) const { return vat(value).dtype; }
  bool rankKnown(ValueId value) const { return vat(value).rankKnown; }
  std::span<const DimEntry> dims(ValueId value) const;
  std::string_view symbolName(std::uint32_t symbol) const { return strings_.str(symbol); }
  std::int64_t bytes(ValueId value) const { return vat(value).bytes; } // -1 when unknown
  ValueType valueType(ValueId value) const;
  ValueId findValue(std::string_view valueName) const; // kNoValue when absent

  // ----- parameters -----
  std::uint32_t numParameters() const { return static_cast<std::uint32_t>(params_.size()); }
  const Parameter& parameter(ParamId param) const { return params_[index(param)]; }
  // The parameter that owns `param`'s tensor: itself, or the one its aliasOf names when this
  // graph holds it. Parameters with the same storage are one tensor.
  ParamId storageOf(ParamId param) const { return storage_[index(param)]; }
  // Reads the parameter's bytes (inline data, or its external file). Empty for FX graphs,
  // which record sizes only.
  Expected<std::string> readParameterData(ParamId param) const;
  // The same bytes without a copy when they are in memory already (inline, or inside the mapped
  // model file); nullopt for external data, or bounds readParameterData would refuse.
  std::optional<std::string_view> parameterDataInMemory(ParamId param) const;

  const ModelInfo& modelInfo() const { return info_; }
  // The mapped model file behind ModelFile parameters (null for other graphs); extracted
  // subgraphs share it so their parameters stay lazy.
  const std::shared_ptr<const MappedFile>& modelFile() const { return modelFile_; }
  const StringTable& strings() const { return strings_; }

private:
  friend class GraphBuilder;
  friend Status verifyGraph(const Graph& graph);
  // One node: string ids and ranges into the CSR arrays. The builder uses the same record for
  // the nodes it has not ordered yet (its ranges then index the builder's own arrays).
  struct Node {
    NodeKind kind;
    std::uint32_t implicitInputs;
    std::uint32_t name, domain, opType, scope;
    IdRange inputs, outputs, attrs, params;
  };
  struct Value {
    std::uint32_t name;
    NodeId producer;
    ValueKind kind;
    DType dtype;
    bool rankKnown;
    std::uint32_t typeName;
    IdRange dims;
    IdRange users;
    std::int64_t bytes;
  };
  const Node& at(NodeId node) const { return nodes_[index(node)]; }
  const Value& vat(ValueId value) const { return values_[index(value)]; }

  ModelInfo info_;
  StringTable strings_;
  std::vector<Node> nodes_;
  std::vector<Value> values_;
  std::vector<ValueId> operands_;  // CSR: node inputs
  std::vector<ValueId> results_;   // CSR: node outputs
  std::vector<NodeId> users_;      // CSR: value users
  std::vector<DimEntry> dims_;     // CSR: value dims
  std::vector<Attribute> attrs_;   // CSR: node attributes
  std::vector<ParamId> nodeParams_; // CSR: node parameters
  std::vector<Parameter> params_;
  std::vector<ParamId> storage_; // per parameter: storageOf()
  std::vector<NodeId> inputNodes_;
  std::vector<std::uint32_t> nodeByName_;  // indexed by string id
  std::vector<std::uint32_t> valueByName_; // indexed by string id
  std::shared_ptr<const std::string> inlineData_;  // Inline parameter bytes
  std::shared_ptr<const MappedFile> modelFile_;     // ModelFile parameter bytes
};

// Re-checks every structural invariant of a built graph (ids in range, topological order,
// unique names, consistent users, a single trailing Output node). A failure is a bug in
// whatever produced the graph; the error names the offending node or value.
Status verifyGraph(const Graph& graph);

// The names of the graph's inputs and of its outputs, in order (what unnamed tensors bind to).
std::vector<std::string> graphInputNames(const Graph& graph);
std::vector<std::string> graphOutputNames(const Graph& graph);

} // namespace cleave::ir
