#include "ir/printer.h"

#include <cstdio>
#include <sstream>

namespace cleave::ir {
namespace {

std::string formatType(const Graph& graph, ValueId value) {
  ValueType type = graph.valueType(value);
  switch (type.kind) {
  case ValueKind::Tensor:
    return std::string(dtypeName(type.dtype)) + formatShape(type.shape);
  case ValueKind::Unknown: return "?";
  default: {
    std::string text(valueKindName(type.kind));
    if (!type.typeName.empty())
      text += "<" + type.typeName + ">";
    return text;
  }
  }
}

std::string formatDouble(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

// FNV-1a: a stable fingerprint of blob attributes for the text form.
std::string fingerprint(const std::string& bytes) {
  std::uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : bytes)
    hash = (hash ^ c) * 1099511628211ull;
  char text[40];
  std::snprintf(text, sizeof text, "%zu bytes #%016llx", bytes.size(),
                static_cast<unsigned long long>(hash));
  return text;
}

template <typename T, typename F> std::string joinList(const std::vector<T>& items, F format) {
  std::string text = "[";
  for (std::size_t i = 0; i < items.size(); ++i)
    text += (i ? "," : "") + format(items[i]);
  return text + "]";
}

} // namespace

std::string formatAttribute(const Attribute& attr) {
  std::string value;
  switch (attr.kind) {
  case AttrKind::Int: value = std::to_string(attr.intValue); break;
  case AttrKind::Float: value = formatDouble(attr.floatValue); break;
  case AttrKind::String: value = "\"" + attr.text + "\""; break;
  case AttrKind::Json: value = attr.text; break;
  case AttrKind::Ints:
    value = joinList(attr.ints, [](std::int64_t v) { return std::to_string(v); });
    break;
  case AttrKind::Floats: value = joinList(attr.floats, formatDouble); break;
  case AttrKind::Strings:
    value = joinList(attr.strings, [](const std::string& s) { return "\"" + s + "\""; });
    break;
  case AttrKind::Tensor: value = "tensor(" + fingerprint(attr.text) + ")"; break;
  case AttrKind::Graph: value = "graph(" + fingerprint(attr.text) + ")"; break;
  }
  return attr.name + "=" + value;
}

void printGraph(const Graph& graph, std::ostream& out) {
  const ModelInfo& info = graph.modelInfo();
  static const char* kFormats[] = {"onnx", "fx", "synthetic"};
  out << "graph \"" << info.graphName << "\" (" << kFormats[static_cast<int>(info.format)];
  for (const auto& [domain, version] : info.opsetImports)
    out << ", opset " << (domain.empty() ? "ai.onnx" : domain) << ":" << version;
  out << ")\n";
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    auto outputs = graph.outputs(node);
    auto inputs = graph.inputs(node);
    auto operands = [&] {
      std::string text;
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        if (i)
          text += ", ";
        if (i == inputs.size() - graph.numImplicitInputs(node) && graph.numImplicitInputs(node))
          text += "implicit ";
        text += inputs[i] == kNoValue ? "_" : "%" + std::string(graph.valueName(inputs[i]));
      }
      return text;
    };
    if (graph.kind(node) == NodeKind::Output) {
      out << "output(" << operands() << ")\n";
      continue;
    }
    for (std::size_t i = 0; i < outputs.size(); ++i)
      out << (i ? ", " : "") << "%" << graph.valueName(outputs[i]) << " : "
          << formatType(graph, outputs[i]);
    out << (outputs.empty() ? "" : " ") << "= ";
    switch (graph.kind(node)) {
    case NodeKind::Input: out << "placeholder"; break;
    case NodeKind::Parameter: out << "get_attr"; break;
    case NodeKind::ModuleCall: out << "call_module " << graph.target(node) << "(" << operands() << ")"; break;
    case NodeKind::MethodCall: out << "call_method " << graph.target(node) << "(" << operands() << ")"; break;
    default: out << graph.target(node) << "(" << operands() << ")"; break;
    }
    auto attrs = graph.attributes(node);
    if (!attrs.empty()) {
      out << " {";
      for (std::size_t i = 0; i < attrs.size(); ++i)
        out << (i ? ", " : "") << formatAttribute(attrs[i]);
      out << "}";
    }
    bool namedLikeValue = outputs.size() == 1 && graph.valueName(outputs[0]) == graph.name(node);
    std::string comment;
    if (!namedLikeValue)
      comment += std::string(graph.name(node));
    if (!graph.scope(node).empty())
      comment += (comment.empty() ? "@" : " @") + std::string(graph.scope(node));
    for (ParamId param : graph.parameters(node)) {
      const Parameter& p = graph.parameter(param);
      comment += (comment.empty() ? "" : " ") + std::string("param ") + p.name + ":" +
                 std::string(dtypeName(p.dtype)) + "(" + std::to_string(p.bytes) + " B)";
    }
    if (!comment.empty())
      out << "  # " << comment;
    out << "\n";
  }
}

std::string printGraph(const Graph& graph) {
  std::ostringstream out;
  printGraph(graph, out);
  return out.str();
}

} // namespace cleave::ir
