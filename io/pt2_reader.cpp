#include "io/pt2.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

#include "base/json.h"
#include "base/mapped_file.h"
#include "io/zip.h"
#include "ir/builder.h"

namespace cleave::io {
namespace {
using nlohmann::json;

// The JSON members a program needs are small; a weight is never read.
constexpr std::size_t kMaxJsonMemberBytes = std::size_t{1} << 30;

// torch's serde ScalarType codes (torch/_export/serde/schema.py), with torch's dtype names.
struct SerdeScalarType {
  int code;
  ir::DType dtype;
  std::string_view torchName;
};
constexpr SerdeScalarType kScalarTypes[] = {
    {1, ir::DType::U8, "uint8"},          {2, ir::DType::I8, "int8"},
    {3, ir::DType::I16, "int16"},         {4, ir::DType::I32, "int32"},
    {5, ir::DType::I64, "int64"},         {6, ir::DType::F16, "float16"},
    {7, ir::DType::F32, "float32"},       {8, ir::DType::F64, "float64"},
    {10, ir::DType::C64, "complex64"},    {11, ir::DType::C128, "complex128"},
    {12, ir::DType::Bool, "bool"},        {13, ir::DType::BF16, "bfloat16"},
    {28, ir::DType::U16, "uint16"},       {29, ir::DType::F8E4M3FN, "float8_e4m3fn"},
    {30, ir::DType::F8E5M2, "float8_e5m2"}, {31, ir::DType::F8E4M3FNUZ, "float8_e4m3fnuz"},
    {32, ir::DType::F8E5M2FNUZ, "float8_e5m2fnuz"},
};

const SerdeScalarType* scalarType(const json& code) {
  if (!code.is_number_integer())
    return nullptr;
  for (const SerdeScalarType& type : kScalarTypes)
    if (type.code == code.get<int>())
      return &type;
  return nullptr;
}

// The archive's members that describe the program, by their path inside its top folder.
struct Pt2Archive {
  std::map<std::string, std::string> members; // "archive_format", "models/model.json", ...
};

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  return first == std::string::npos ? "" : text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

Expected<Pt2Archive> openArchive(std::string_view bytes, const std::string& path) {
  auto describes = [](std::string_view name) {
    return name.ends_with("/archive_format") || name.ends_with("/archive_version") || name.ends_with(".json");
  };
  CLEAVE_TRY(std::vector<ZipMember> members, readZip(bytes, path, kMaxJsonMemberBytes, describes));
  // Every member sits in one top folder (torch names it after the file); archive_format marks it.
  auto format = std::find_if(members.begin(), members.end(),
                             [](const ZipMember& m) { return m.name.ends_with("archive_format"); });
  if (format == members.end())
    return Error(ErrorCode::ParseError) << path << ": a zip archive without archive_format (not a torch.export .pt2)";
  const std::string folder = format->name.substr(0, format->name.size() - std::string_view("archive_format").size());
  Pt2Archive archive;
  for (ZipMember& member : members)
    if (member.name.rfind(folder, 0) == 0)
      archive.members[member.name.substr(folder.size())] = std::move(member.data);
  return archive;
}

Status checkVersions(const Pt2Archive& archive, const std::string& path) {
  const std::string format = trimmed(archive.members.at("archive_format"));
  if (format != "pt2")
    return Error(ErrorCode::Unsupported) << path << ": archive format '" << format
                                         << "' is not one cleave reads (it reads pt2 archives, version 0)";
  auto version = archive.members.find("archive_version");
  const std::string number = version == archive.members.end() ? "" : trimmed(version->second);
  if (number != "0")
    return Error(ErrorCode::Unsupported) << path << ": pt2 archive version '" << number
                                         << "' is not one cleave reads (it reads version 0, as torch 2.11 writes)";
  return {};
}

// models/model.json, or the archive's one model.
Expected<std::string> programText(const Pt2Archive& archive, const std::string& path) {
  auto model = archive.members.find("models/model.json");
  if (model != archive.members.end())
    return model->second;
  std::vector<std::string> models;
  for (const auto& [name, data] : archive.members)
    if (name.rfind("models/", 0) == 0 && name.find('/', 7) == std::string::npos)
      models.push_back(name);
  if (models.size() != 1)
    return Error(ErrorCode::ParseError) << path << ": " << (models.empty() ? "no program (models/*.json)" : "several programs")
                                        << " in the archive";
  return archive.members.at(models[0]);
}

Status checkSchema(const json& program, const std::string& path) {
  const json& version = program.value("schema_version", json());
  const int major = version.is_object() ? version.value("major", -1) : -1;
  if (major != kPt2SchemaMajor)
    return Error(ErrorCode::Unsupported) << path << ": ExportedProgram schema " << major << "."
                                         << (version.is_object() ? version.value("minor", -1) : -1)
                                         << " is not one cleave reads (it reads 8.x, as torch 2.11 writes 8.17)";
  return {};
}

// A tensor's type from its serde TensorMeta: dtype and sizes, each an int or a symbol.
Expected<ir::ValueType> tensorType(const json& meta, const std::string& what) {
  const SerdeScalarType* type = scalarType(meta.value("dtype", json()));
  if (!type)
    return Error(ErrorCode::ParseError) << what << " has unknown dtype " << toJsonText(meta.value("dtype", json()));
  ir::ValueType value;
  value.kind = ir::ValueKind::Tensor;
  value.dtype = type->dtype;
  value.shape.rankKnown = true;
  for (const json& size : meta.value("sizes", json::array())) {
    ir::Dim dim;
    if (size.contains("as_int")) {
      CLEAVE_TRY(dim.extent, jsonInteger(size.at("as_int"), what, "size", 0, INT64_MAX));
    } else if (size.contains("as_expr")) {
      dim.symbol = size.at("as_expr").value("expr_str", "?");
    } else {
      return Error(ErrorCode::ParseError) << what << " has a size that is neither an int nor an expression";
    }
    value.shape.dims.push_back(std::move(dim));
  }
  CLEAVE_CHECK(ir::checkTensorSize(value, what));
  return value;
}

// A node argument as FX-graph JSON writes one (docs/fx-graph-json.md), appending each value it
// names to `operands`: tensors and symbolic ints are node references.
json fxArgument(const json& argument, std::vector<std::string>& operands) {
  auto reference = [&](const std::string& name) {
    if (std::find(operands.begin(), operands.end(), name) == operands.end())
      operands.push_back(name);
    return json{{"node", name}};
  };
  auto symbol = [&](const json& sym) -> json { // SymIntArgument and its kin: a name or a constant
    if (sym.contains("as_name"))
      return reference(sym.at("as_name").get<std::string>());
    for (const char* constant : {"as_int", "as_float", "as_bool"})
      if (sym.contains(constant))
        return sym.at(constant);
    return json{{"repr", sym.dump()}};
  };
  auto optionalTensor = [&](const json& optional) -> json {
    return optional.contains("as_tensor") ? reference(optional.at("as_tensor").at("name").get<std::string>()) : json();
  };
  if (!argument.is_object() || argument.empty())
    return json();
  const auto only = argument.begin(); // an Argument is a union: one key
  const std::string& kind = only.key();
  const json& value = only.value();
  if (kind == "as_none")
    return json();
  if (kind == "as_tensor")
    return reference(value.at("name").get<std::string>());
  if (kind == "as_tensors") {
    json list = json::array();
    for (const json& tensor : value)
      list.push_back(reference(tensor.at("name").get<std::string>()));
    return list;
  }
  if (kind == "as_optional_tensor")
    return optionalTensor(value);
  if (kind == "as_optional_tensors") {
    json list = json::array();
    for (const json& optional : value)
      list.push_back(optionalTensor(optional));
    return list;
  }
  if (kind == "as_sym_int" || kind == "as_sym_float" || kind == "as_sym_bool")
    return symbol(value);
  if (kind == "as_sym_ints" || kind == "as_sym_floats" || kind == "as_sym_bools") {
    json list = json::array();
    for (const json& sym : value)
      list.push_back(symbol(sym));
    return list;
  }
  if (kind == "as_scalar_type") {
    const SerdeScalarType* type = scalarType(value);
    return type ? json{{"dtype", type->torchName}} : json{{"repr", value.dump()}};
  }
  static constexpr std::string_view kLiterals[] = {"as_int", "as_ints", "as_float", "as_floats", "as_bool",
                                                   "as_bools", "as_string", "as_strings", "as_int_lists"};
  if (std::find(std::begin(kLiterals), std::end(kLiterals), kind) != std::end(kLiterals))
    return value;
  return json{{"repr", kind + ":" + value.dump()}}; // devices, layouts, memory formats, graphs
}

// The innermost module of a node's nn_module_stack ("key,path,class;key,path,class"): its path.
std::string scopeOf(const json& metadata) {
  const std::string stack = metadata.is_object() ? metadata.value("nn_module_stack", "") : "";
  if (stack.empty())
    return "";
  const std::string innermost = stack.substr(stack.rfind(';') == std::string::npos ? 0 : stack.rfind(';') + 1);
  const auto first = innermost.find(','), second = innermost.find(',', first + 1);
  return first == std::string::npos || second == std::string::npos ? "" : innermost.substr(first + 1, second - first - 1);
}

// What the graph builds from: the serde graph and the types of its values.
class ProgramReader {
public:
  ProgramReader(const json& graph, std::string path) : path_(std::move(path)) {
    auto tensors = graph.find("tensor_values");
    if (tensors != graph.end() && tensors->is_object())
      tensors_ = &*tensors;
  }

  Expected<ir::ValueType> typeOf(const std::string& name) const {
    if (auto it = tensors_->find(name); it != tensors_->end())
      return tensorType(*it, path_ + ": value '" + name + "'");
    ir::ValueType scalar;
    scalar.kind = ir::ValueKind::Scalar; // a symbolic int, float or bool
    return scalar;
  }

  // One graph input as its signature entry says.
  Status addInput(ir::GraphBuilder& builder, const json& spec) {
    if (!spec.is_object() || spec.empty())
      return Error(ErrorCode::ParseError) << path_ << ": an input spec is empty";
    const auto only = spec.begin(); // an InputSpec is a union: one key
    const std::string& kind = only.key();
    const json& entry = only.value();
    if (kind == "user_input") {
      const json& arg = entry.value("arg", json());
      std::string name;
      if (arg.contains("as_tensor"))
        name = arg.at("as_tensor").at("name").get<std::string>();
      else if (arg.contains("as_sym_int") && arg.at("as_sym_int").contains("as_name"))
        name = arg.at("as_sym_int").at("as_name").get<std::string>();
      else
        return {}; // a constant the program baked in: nothing reads it by name
      ir::NodeSpec node;
      node.kind = ir::NodeKind::Input;
      node.name = name;
      CLEAVE_TRY(ir::ValueType type, typeOf(name));
      node.outputs.push_back({name, std::move(type)});
      builder.addNode(std::move(node));
      return {};
    }
    if (kind == "parameter" || kind == "buffer" || kind == "tensor_constant")
      return addParameter(builder, kind, entry);
    if (kind == "constant_input")
      return {};
    return Error(ErrorCode::Unsupported) << path_ << ": an input of kind '" << kind
                                         << "' (cleave reads user inputs, parameters, buffers and tensor constants)";
  }

  Status addNode(ir::GraphBuilder& builder, const json& entry) {
    ir::NodeSpec node;
    node.kind = ir::NodeKind::Op;
    node.opType = entry.value("target", "");
    node.scope = scopeOf(entry.value("metadata", json()));
    json args = json::array(), kwargs = json::object();
    for (const json& input : entry.value("inputs", json::array())) {
      json converted = fxArgument(input.value("arg", json()), node.inputs);
      const json& kind = input.value("kind", json());
      if (kind.is_number_integer() && kind.get<int>() == 2) // ArgumentKind.KEYWORD
        kwargs[input.value("name", "")] = std::move(converted);
      else
        args.push_back(std::move(converted));
    }
    addJsonAttribute(node, "args", args);
    addJsonAttribute(node, "kwargs", kwargs);
    for (const json& output : entry.value("outputs", json::array()))
      CLEAVE_CHECK(addOutputValues(node, output));
    const json& name = entry.contains("name") ? entry.at("name") : kNoName;
    if (!name.is_string() && !name.is_null())
      return Error(ErrorCode::ParseError) << path_ << ": a '" << node.opType << "' node has a name that is not a string";
    node.name = name.is_string() ? name.get<std::string>() : node.outputs.empty() ? "" : node.outputs[0].name;
    if (node.name.empty())
      return Error(ErrorCode::ParseError) << path_ << ": a '" << node.opType << "' node has no name";
    if (node.outputs.empty()) { // pipe_split and other calls made for their effect: one None value
      ir::ValueType none;
      none.kind = ir::ValueKind::None;
      node.outputs.push_back({node.name, none});
    }
    builder.addNode(std::move(node));
    return {};
  }

private:
  Status addParameter(ir::GraphBuilder& builder, const std::string& kind, const json& entry) {
    const std::string name = entry.value("arg", json::object()).value("name", "");
    const std::string target = entry.value(kind == "parameter" ? "parameter_name"
                                           : kind == "buffer"  ? "buffer_name"
                                                               : "tensor_constant_name",
                                           "");
    if (name.empty() || target.empty())
      return Error(ErrorCode::ParseError) << path_ << ": a " << kind << " input without its names";
    CLEAVE_TRY(ir::ValueType type, typeOf(name));
    if (type.kind != ir::ValueKind::Tensor)
      return Error(ErrorCode::ParseError) << path_ << ": " << kind << " '" << target << "' has no tensor meta";
    const json& meta = tensors_->at(name);
    ir::Parameter parameter;
    parameter.name = target;
    parameter.dtype = type.dtype;
    for (const ir::Dim& dim : type.shape.dims)
      parameter.dims.push_back(dim.extent);
    parameter.bytes = ir::byteSizeOf(type);
    parameter.fixed = kind == "buffer"            ? ir::Fixed::Buffer
                      : kind == "tensor_constant" ? ir::Fixed::Constant
                      : meta.value("requires_grad", true) ? ir::Fixed::Trains
                                                          : ir::Fixed::Frozen;
    ir::NodeSpec node;
    node.kind = ir::NodeKind::Parameter;
    node.name = name;
    node.opType = target;
    const auto owner = target.rfind('.');
    node.scope = owner == std::string::npos ? "" : target.substr(0, owner);
    ir::Attribute attribute;
    attribute.name = "target";
    attribute.kind = ir::AttrKind::String;
    attribute.text = target;
    node.attributes.push_back(std::move(attribute));
    node.parameters.push_back(std::move(parameter));
    node.outputs.push_back({name, std::move(type)});
    builder.addNode(std::move(node));
    return {};
  }

  Status addOutputValues(ir::NodeSpec& node, const json& output) {
    auto add = [&](const std::string& name) -> Status {
      CLEAVE_TRY(ir::ValueType type, typeOf(name));
      node.outputs.push_back({name, std::move(type)});
      return {};
    };
    if (output.contains("as_tensor"))
      return add(output.at("as_tensor").at("name").get<std::string>());
    if (output.contains("as_tensors")) {
      for (const json& tensor : output.at("as_tensors"))
        CLEAVE_CHECK(add(tensor.at("name").get<std::string>()));
      return {};
    }
    for (const char* symbolic : {"as_sym_int", "as_sym_float", "as_sym_bool"})
      if (output.contains(symbolic) && output.at(symbolic).contains("as_name"))
        return add(output.at(symbolic).at("as_name").get<std::string>());
    return {}; // None, or a constant: no value
  }

  static void addJsonAttribute(ir::NodeSpec& node, const char* name, const json& value) {
    if (value.empty())
      return;
    ir::Attribute attribute;
    attribute.name = name;
    attribute.kind = ir::AttrKind::Json;
    attribute.text = value.dump();
    node.attributes.push_back(std::move(attribute));
  }

  static inline const json kNoTensors = json::object();
  static inline const json kNoName = json(); // a node without one is named by its first value
  const json* tensors_ = &kNoTensors; // the graph's tensor_values: each value's TensorMeta
  std::string path_;
};

// The graph's outputs: every tensor or symbolic value it returns (user outputs, a loss, and the
// buffers a training program updates), in order.
std::vector<std::string> outputNames(const json& graph) {
  std::vector<std::string> names;
  for (const json& output : graph.value("outputs", json::array())) {
    if (output.contains("as_tensor"))
      names.push_back(output.at("as_tensor").at("name").get<std::string>());
    else if (output.contains("as_tensors"))
      for (const json& tensor : output.at("as_tensors"))
        names.push_back(tensor.at("name").get<std::string>());
    else if (output.contains("as_sym_int") && output.at("as_sym_int").contains("as_name"))
      names.push_back(output.at("as_sym_int").at("as_name").get<std::string>());
  }
  return names;
}

Expected<ir::Graph> graphFromProgram(const json& program, const std::string& path) {
  CLEAVE_CHECK(checkSchema(program, path));
  const json& module = program.value("graph_module", json::object());
  const json& graph = module.value("graph", json::object());
  const json& inputs = graph.value("inputs", json::array());
  const json& specs = module.value("signature", json::object()).value("input_specs", json::array());
  if (!graph.contains("nodes") || !graph["nodes"].is_array())
    return Error(ErrorCode::ParseError) << path << ": the program has no node list";
  if (inputs.size() != specs.size())
    return Error(ErrorCode::ParseError) << path << ": " << inputs.size() << " graph inputs but " << specs.size()
                                        << " input specs";
  ir::GraphBuilder builder(ir::SourceFormat::Fx);
  ir::ModelInfo& info = builder.modelInfo();
  info.producerName = "torch.export";
  info.producerVersion = program.value("torch_version", "");
  info.sourcePath = path;
  info.buffersListed = true; // the signature says which tensors are parameters, buffers, constants
  builder.reserve(inputs.size() + graph.at("nodes").size(), graph.at("nodes").size());
  ProgramReader reader(graph, path);
  for (const json& spec : specs)
    CLEAVE_CHECK(reader.addInput(builder, spec));
  for (const json& node : graph.at("nodes"))
    CLEAVE_CHECK(reader.addNode(builder, node));
  builder.setOutputs(outputNames(graph));
  Expected<ir::Graph> built = std::move(builder).finish();
  if (!built)
    return std::move(built.error().withContext(path));
  return built;
}

} // namespace

Expected<ir::Graph> parseExportedProgramJson(std::string_view text, const std::string& sourceName) {
  CLEAVE_TRY(json program, parseJsonInput(text, sourceName));
  return guardJson(sourceName, [&]() { return graphFromProgram(program, sourceName); });
}

Expected<ir::Graph> parseExportedProgram(std::string_view bytes, const std::string& sourceName) {
  CLEAVE_TRY(Pt2Archive archive, openArchive(bytes, sourceName));
  CLEAVE_CHECK(checkVersions(archive, sourceName));
  CLEAVE_TRY(std::string text, programText(archive, sourceName));
  return parseExportedProgramJson(text, sourceName);
}

Expected<ir::Graph> readExportedProgram(const std::string& path) {
  CLEAVE_TRY(std::shared_ptr<const MappedFile> file, MappedFile::open(path));
  return parseExportedProgram(file->bytes(), path);
}

} // namespace cleave::io
