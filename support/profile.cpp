#include "support/profile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <optional>

#include "base/enum_table.h"
#include "base/file_io.h"
#include "base/json.h"

namespace cleave::support {
namespace {
using nlohmann::json;

struct OpRule {
  bool anyDtype = true;
  std::vector<std::optional<std::vector<ir::DType>>> inputs; // per positional input
  std::vector<std::pair<std::string, std::vector<ir::DType>>> kwargs;
  int maxRank = -1;
  bool staticShapes = false;       // every tensor input has a fully known shape
  std::int64_t maxElements = -1;   // every tensor input has at most this many elements
  std::vector<std::pair<std::string, json>> attrs; // allowed values (ints or strings)
};

std::string joinDtypes(const std::vector<ir::DType>& dtypes) {
  std::string text;
  for (ir::DType dtype : dtypes)
    text += (text.empty() ? "" : ", ") + std::string(ir::dtypeName(dtype));
  return text;
}

const ir::Attribute* findAttr(const ir::Graph& graph, ir::NodeId node, std::string_view name) {
  return graph.findAttribute(node, name);
}

} // namespace

struct Profile::Rule {
  bool hasOps = false;
  std::map<std::string, OpRule, std::less<>> ops;
  std::vector<std::string> deny, forceCpu;
  std::vector<std::unique_ptr<Rule>> allOf, anyOf;
};

namespace {

class ProfileParser {
public:
  explicit ProfileParser(std::string source) : source_(std::move(source)) {}

  Expected<std::unique_ptr<Profile::Rule>> parseRule(const json& node, const std::string& at) {
    if (!node.is_object())
      return fail(at, "expected an object");
    auto rule = std::make_unique<Profile::Rule>();
    for (const auto& [key, value] : node.items()) {
      std::string here = at.empty() ? key : at + "." + key;
      if (key == "name" || key == "description" || key == "comment" || key == "source" || key == "version") {
        continue;
      } else if (key == "ops") {
        rule->hasOps = true;
        if (value.is_array()) {
          for (std::size_t i = 0; i < value.size(); ++i) {
            if (!value[i].is_string())
              return fail(here + "[" + std::to_string(i) + "]", "expected an op name");
            rule->ops.emplace(value[i].get<std::string>(), OpRule{});
          }
        } else if (value.is_object()) {
          for (const auto& [op, spec] : value.items()) {
            CLEAVE_TRY(OpRule parsed, parseOp(spec, here + "." + op));
            rule->ops.emplace(op, std::move(parsed));
          }
        } else {
          return fail(here, "expected a list of op names or an object of op rules");
        }
      } else if (key == "deny" || key == "force_cpu") {
        CLEAVE_TRY(std::vector<std::string> globs, parseStrings(value, here));
        (key == "deny" ? rule->deny : rule->forceCpu) = std::move(globs);
      } else if (key == "all_of" || key == "any_of") {
        if (!value.is_array() || value.empty())
          return fail(here, "expected a non-empty list of profiles");
        for (std::size_t i = 0; i < value.size(); ++i) {
          CLEAVE_TRY(auto child, parseRule(value[i], here + "[" + std::to_string(i) + "]"));
          (key == "all_of" ? rule->allOf : rule->anyOf).push_back(std::move(child));
        }
      } else {
        return fail(here, "unknown key (expected ops, deny, force_cpu, all_of, any_of, name, description, source, "
                          "version)");
      }
    }
    return rule;
  }

private:
  Error fail(const std::string& at, const std::string& what) {
    return Error(ErrorCode::ParseError) << source_ << ": " << (at.empty() ? "top level" : at) << ": " << what;
  }

  Expected<std::vector<std::string>> parseStrings(const json& value, const std::string& at) {
    if (!value.is_array())
      return fail(at, "expected a list of strings");
    std::vector<std::string> out;
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (!value[i].is_string())
        return fail(at + "[" + std::to_string(i) + "]", "expected a string");
      out.push_back(value[i].get<std::string>());
    }
    return out;
  }

  Expected<std::vector<ir::DType>> parseDtypes(const json& value, const std::string& at) {
    if (!value.is_array())
      return fail(at, "expected a list of dtype names (f32, f16, bf16, i8, i64, bool, ...)");
    std::vector<ir::DType> out;
    for (std::size_t i = 0; i < value.size(); ++i) {
      std::optional<ir::DType> dtype =
          value[i].is_string() ? ir::parseDTypeName(value[i].get<std::string>()) : std::nullopt;
      if (!dtype || *dtype == ir::DType::Undefined)
        return fail(at + "[" + std::to_string(i) + "]", "unknown dtype " + value[i].dump());
      out.push_back(*dtype);
    }
    return out;
  }

  Expected<OpRule> parseOp(const json& spec, const std::string& at) {
    OpRule rule;
    if (spec.is_null())
      return rule;
    if (!spec.is_object())
      return fail(at, "expected null (any dtype) or an object with inputs, kwargs, max_rank, static_shapes, "
                      "max_elements, attrs");
    for (const auto& [key, value] : spec.items()) {
      std::string here = at + "." + key;
      if (key == "inputs") {
        if (!value.is_array())
          return fail(here, "expected a list with one entry per positional input");
        rule.anyDtype = false;
        for (std::size_t i = 0; i < value.size(); ++i) {
          if (value[i].is_null()) {
            rule.inputs.emplace_back(std::nullopt);
            continue;
          }
          CLEAVE_TRY(std::vector<ir::DType> dtypes, parseDtypes(value[i], here + "[" + std::to_string(i) + "]"));
          rule.inputs.emplace_back(std::move(dtypes));
        }
      } else if (key == "kwargs") {
        if (!value.is_object())
          return fail(here, "expected an object of keyword -> dtype list");
        rule.anyDtype = false;
        for (const auto& [name, dtypes] : value.items()) {
          CLEAVE_TRY(std::vector<ir::DType> parsed, parseDtypes(dtypes, here + "." + name));
          rule.kwargs.emplace_back(name, std::move(parsed));
        }
      } else if (key == "max_rank") {
        if (!value.is_number_integer() || value.get<int>() < 0)
          return fail(here, "expected a non-negative integer");
        rule.maxRank = value.get<int>();
      } else if (key == "static_shapes") {
        if (!value.is_boolean())
          return fail(here, "expected true or false");
        rule.staticShapes = value.get<bool>();
      } else if (key == "max_elements") {
        if (!value.is_number_integer() || value.get<std::int64_t>() < 0)
          return fail(here, "expected a non-negative integer");
        rule.maxElements = value.get<std::int64_t>();
      } else if (key == "attrs") {
        if (!value.is_object())
          return fail(here, "expected an object of attribute -> allowed values");
        for (const auto& [name, allowed] : value.items()) {
          if (!allowed.is_array())
            return fail(here + "." + name, "expected a list of allowed values");
          rule.attrs.emplace_back(name, allowed);
        }
      } else {
        return fail(here, "unknown key (expected inputs, kwargs, max_rank, static_shapes, max_elements, attrs)");
      }
    }
    return rule;
  }

  std::string source_;
};

Decision yes() { return {true, Reason::Supported, ""}; }
Decision no(Reason reason, std::string detail) { return {false, reason, std::move(detail)}; }

std::string describeOperand(const ir::Graph& graph, ir::ValueId value) {
  return "%" + std::string(graph.valueName(value));
}

Decision checkOp(const ir::Graph& graph, ir::NodeId node, const OpRule& rule) {
  if (!rule.anyDtype) {
    for (std::size_t i = 0; i < rule.inputs.size(); ++i) {
      if (!rule.inputs[i])
        continue;
      ir::ValueId value = positionalOperand(graph, node, i);
      if (value == ir::kNoValue)
        continue;
      const std::vector<ir::DType>& allowed = *rule.inputs[i];
      if (graph.valueKind(value) != ir::ValueKind::Tensor)
        return no(Reason::UnsupportedDtype, "input " + std::to_string(i) + " (" + describeOperand(graph, value) +
                                                ") is not a tensor, allowed: " + joinDtypes(allowed));
      if (std::find(allowed.begin(), allowed.end(), graph.dtype(value)) == allowed.end())
        return no(Reason::UnsupportedDtype, "input " + std::to_string(i) + " (" + describeOperand(graph, value) +
                                                ") is " + std::string(ir::dtypeName(graph.dtype(value))) +
                                                ", allowed: " + joinDtypes(allowed));
    }
    for (const auto& [name, allowed] : rule.kwargs) {
      ir::ValueId value = keywordOperand(graph, node, name);
      if (value == ir::kNoValue)
        continue;
      bool ok = graph.valueKind(value) == ir::ValueKind::Tensor &&
                std::find(allowed.begin(), allowed.end(), graph.dtype(value)) != allowed.end();
      if (!ok)
        return no(Reason::UnsupportedDtype, "keyword " + name + " (" + describeOperand(graph, value) +
                                                ") is not one of " + joinDtypes(allowed));
    }
  }
  if (rule.maxRank >= 0)
    for (ir::ValueId value : graph.inputs(node))
      if (value != ir::kNoValue && graph.valueKind(value) == ir::ValueKind::Tensor && graph.rankKnown(value) &&
          graph.dims(value).size() > static_cast<std::size_t>(rule.maxRank))
        return no(Reason::UnsupportedRank, describeOperand(graph, value) + " has rank " +
                                               std::to_string(graph.dims(value).size()) + ", max " +
                                               std::to_string(rule.maxRank));
  if (rule.staticShapes || rule.maxElements >= 0)
    for (ir::ValueId value : graph.inputs(node)) {
      if (value == ir::kNoValue || graph.valueKind(value) != ir::ValueKind::Tensor)
        continue;
      ir::Shape shape = graph.valueType(value).shape;
      if (rule.staticShapes && !shape.isStatic())
        return no(Reason::UnsupportedShape, describeOperand(graph, value) + " has shape " + ir::formatShape(shape) +
                                                ", static shapes required");
      if (rule.maxElements >= 0 && shape.isStatic() && shape.numElements() > rule.maxElements)
        return no(Reason::UnsupportedShape, describeOperand(graph, value) + " has " +
                                                std::to_string(shape.numElements()) + " elements, max " +
                                                std::to_string(rule.maxElements));
    }
  for (const auto& [name, allowed] : rule.attrs) {
    const ir::Attribute* attr = findAttr(graph, node, name);
    if (!attr)
      continue;
    json actual;
    if (attr->kind == ir::AttrKind::Int)
      actual = attr->intValue;
    else if (attr->kind == ir::AttrKind::String)
      actual = attr->text;
    else if (attr->kind == ir::AttrKind::Ints)
      actual = attr->ints;
    else if (attr->kind == ir::AttrKind::Float)
      actual = attr->floatValue;
    bool found = false;
    for (const json& candidate : allowed)
      found = found || candidate == actual;
    if (!found)
      return no(Reason::UnsupportedAttribute, "attribute " + name + "=" + actual.dump() + ", allowed: " + allowed.dump());
  }
  return yes();
}

Decision evaluate(const Profile::Rule& rule, const ir::Graph& graph, ir::NodeId node) {
  for (const std::string& glob : rule.deny)
    if (matchGlob(glob, graph.name(node)))
      return no(Reason::Denied, "node name matches deny pattern '" + glob + "'");
  for (const std::string& glob : rule.forceCpu)
    if (!graph.scope(node).empty() && matchGlob(glob, graph.scope(node)))
      return no(Reason::Forced, "scope '" + std::string(graph.scope(node)) + "' matches force_cpu pattern '" + glob + "'");
  if (rule.hasOps) {
    std::string target = graph.target(node);
    auto it = rule.ops.find(target);
    if (it == rule.ops.end())
      return no(Reason::UnsupportedOp, "op " + target + " is not in the profile");
    Decision decision = checkOp(graph, node, it->second);
    if (!decision.supported)
      return decision;
  }
  for (const auto& child : rule.allOf) {
    Decision decision = evaluate(*child, graph, node);
    if (!decision.supported)
      return decision;
  }
  if (!rule.anyOf.empty()) {
    Decision first;
    for (std::size_t i = 0; i < rule.anyOf.size(); ++i) {
      Decision decision = evaluate(*rule.anyOf[i], graph, node);
      if (decision.supported)
        return decision;
      if (i == 0)
        first = std::move(decision);
    }
    first.detail = "no alternative of any_of accepts it; first: " + first.detail;
    return first;
  }
  return yes();
}

} // namespace

std::string_view reasonName(Reason reason) {
  static constexpr auto kNames = enumTable<Reason>({
      {Reason::Supported, "supported"},
      {Reason::NotCallable, "not callable"},
      {Reason::UnsupportedOp, "not in the profile"},
      {Reason::UnsupportedDtype, "dtype not allowed"},
      {Reason::UnsupportedRank, "rank too high"},
      {Reason::UnsupportedShape, "shape not allowed"},
      {Reason::UnsupportedAttribute, "attribute not allowed"},
      {Reason::Denied, "denied by name"},
      {Reason::Forced, "forced to cpu"},
      {Reason::Custom, "custom predicate"},
  });
  return kNames.name(reason);
}

Profile::Profile() = default;
Profile::~Profile() = default;
Profile::Profile(Profile&&) noexcept = default;
Profile& Profile::operator=(Profile&&) noexcept = default;

const std::string& Profile::name() const { return name_; }

void Profile::addCustomPredicate(std::string name, CustomPredicate predicate) {
  custom_.emplace_back(std::move(name), std::move(predicate));
}

Expected<Profile> Profile::fromJson(std::string_view text, const std::string& sourceName) {
  CLEAVE_TRY(json doc, parseJsonInput(text, sourceName));
  return guardJson(sourceName, [&]() -> Expected<Profile> {
    ProfileParser parser(sourceName);
    CLEAVE_TRY(std::unique_ptr<Rule> root, parser.parseRule(doc, ""));
    if (!root->hasOps && root->allOf.empty() && root->anyOf.empty())
      return Error(ErrorCode::ParseError) << sourceName << ": top level: the profile lists no ops "
                                             "(give \"ops\", \"all_of\" or \"any_of\")";
    Profile profile;
    profile.root_ = std::move(root);
    profile.name_ = doc.value("name", sourceName);
    return profile;
  });
}

Expected<Profile> Profile::load(const std::string& path) {
  CLEAVE_TRY(std::string text, readFile(path));
  return fromJson(text, path);
}

Decision Profile::decide(const ir::Graph& graph, ir::NodeId node) const {
  if (!graph.isCallable(node))
    return {false, Reason::NotCallable, ""};
  for (const auto& [name, predicate] : custom_)
    if (std::optional<Decision> decision = predicate(graph, node)) {
      if (!decision->supported && decision->reason == Reason::UnsupportedOp && decision->detail.empty())
        decision->reason = Reason::Custom;
      if (!decision->supported && decision->detail.empty())
        decision->detail = "rejected by " + name;
      return *decision;
    }
  return evaluate(*root_, graph, node);
}

IdVector<ir::NodeId, Decision> decideAll(const ir::Graph& graph, const Profile& profile) {
  IdVector<ir::NodeId, Decision> decisions(graph.numNodes());
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n)
    decisions[ir::NodeId{n}] = profile.decide(graph, ir::NodeId{n});
  return decisions;
}

ir::ValueId positionalOperand(const ir::Graph& graph, ir::NodeId node, std::size_t index) {
  if (graph.modelInfo().format != ir::SourceFormat::Fx) {
    auto inputs = graph.inputs(node);
    std::size_t explicitInputs = inputs.size() - graph.numImplicitInputs(node);
    return index < explicitInputs ? inputs[index] : ir::kNoValue;
  }
  const ir::Attribute* args = graph.findAttribute(node, "args");
  if (!args)
    return ir::kNoValue;
  json parsed = json::parse(args->text, nullptr, false);
  if (!parsed.is_array() || index >= parsed.size())
    return ir::kNoValue;
  const json& arg = parsed[index];
  if (!arg.is_object() || !arg.contains("node") || !arg["node"].is_string())
    return ir::kNoValue;
  return graph.findValue(arg["node"].get<std::string>());
}

ir::ValueId keywordOperand(const ir::Graph& graph, ir::NodeId node, std::string_view name) {
  const ir::Attribute* kwargs = graph.findAttribute(node, "kwargs");
  if (!kwargs)
    return ir::kNoValue;
  json parsed = json::parse(kwargs->text, nullptr, false);
  auto it = parsed.is_object() ? parsed.find(std::string(name)) : parsed.end();
  if (it == parsed.end() || !it->is_object() || !it->contains("node") || !(*it)["node"].is_string())
    return ir::kNoValue;
  return graph.findValue((*it)["node"].get<std::string>());
}

} // namespace cleave::support
