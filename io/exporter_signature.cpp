#include "io/exporter_signature.h"

#include <algorithm>
#include <cctype>

namespace cleave::io {

namespace {
// "['a', 'b.c']" -> {a, b.c}: a Python list of strings, as the exporter writes its notes.
std::vector<std::string_view> quotedNames(std::string_view text) {
  std::vector<std::string_view> names;
  while (!text.empty()) {
    const std::size_t open = text.find('\'');
    const std::size_t close = open == std::string_view::npos ? open : text.find('\'', open + 1);
    if (close == std::string_view::npos)
      break;
    names.push_back(text.substr(open + 1, close - open - 1));
    text.remove_prefix(close + 1);
  }
  return names;
}

// A module path as torch.export spells it inside a placeholder's name: "blocks.0" -> "blocks_0".
std::string placeholderSpelling(std::string_view path) {
  std::string spelled(path);
  for (char& c : spelled)
    if (!std::isalnum(static_cast<unsigned char>(c)))
      c = '_';
  return spelled;
}

bool isTemporary(std::string_view name) { return name.starts_with("val_"); }
bool isLiftedConstant(std::string_view name) { return name.find("lifted_tensor") != std::string_view::npos; }

// The FX node a note describes ("%layer_norm" of "%layer_norm : [...] = call_function[...](args
// = (...), kwargs = {...})") and the placeholders among its arguments, in order.
std::string_view fxNodeName(std::string_view fxNode) { return fxNode.substr(0, fxNode.find(' ')); }
std::vector<std::string_view> placeholderArguments(std::string_view fxNode) {
  std::vector<std::string_view> found;
  const std::size_t call = fxNode.find("](");
  if (call == std::string_view::npos)
    return found;
  std::string_view rest = fxNode.substr(call + 2);
  for (std::size_t at = rest.find('%'); at != std::string_view::npos; at = rest.find('%', at + 1)) {
    std::size_t end = at + 1;
    while (end < rest.size() && (std::isalnum(static_cast<unsigned char>(rest[end])) || rest[end] == '_'))
      ++end;
    std::string_view token = rest.substr(at + 1, end - at - 1);
    if (token.starts_with("p_") || token.starts_with("b_") || token.starts_with("c_"))
      if (std::find(found.begin(), found.end(), token) == found.end())
        found.push_back(token);
  }
  return found;
}
} // namespace

ir::Fixed fixedByExporterNote(const ExporterTensorNote& note) {
  if (note.kind == "BUFFER" || note.kind == "CONSTANT_TENSOR")
    return ir::Fixed::Buffer;
  if (note.foldedFrom.empty() || note.kind == "PARAMETER")
    return ir::Fixed::Trains;
  const std::vector<std::string_view> sources = quotedNames(note.foldedFrom);
  auto moduleTensor = [](std::string_view name) {
    return name.find('.') != std::string_view::npos && !isLiftedConstant(name);
  };
  if (sources.empty() || std::any_of(sources.begin(), sources.end(), moduleTensor))
    return ir::Fixed::Trains;
  return sources.size() >= 2 || isTemporary(sources.front()) ? ir::Fixed::Folded : ir::Fixed::Trains;
}

std::string parameterNameOfPlaceholder(std::string_view placeholder, std::string_view nameScopes) {
  const std::string_view bare = placeholder.starts_with("p_") ? placeholder.substr(2) : placeholder;
  const std::vector<std::string_view> scopes = quotedNames(nameScopes);
  for (auto scope = scopes.rbegin(); scope != scopes.rend(); ++scope) {
    const std::string prefix = placeholderSpelling(*scope) + "_";
    if (!scope->empty() && bare.size() > prefix.size() && bare.starts_with(prefix))
      return std::string(*scope) + "." + std::string(bare.substr(prefix.size()));
  }
  return std::string(bare);
}

void ExporterSignature::noteInitializer(std::string_view name, const ExporterTensorNote& note) {
  Initializer& init = initializers_[std::string(name)];
  init.note = note;
  signature_ = signature_ || !note.kind.empty();
}

void ExporterSignature::noteNode(std::size_t index, const ExporterNodeNote& node) {
  for (std::string_view placeholder : placeholderArguments(node.fxNode))
    placeholdersSeen_.insert(placeholder);
  nodes_.push_back(node);
  nodeIndex_.push_back(index);
}

void ExporterSignature::decideFixed(std::string_view name, bool floating, Initializer& init,
                                     const std::unordered_set<std::string>& listedFixed) {
  const ExporterTensorNote& note = init.note;
  if (!note.kind.empty()) {
    init.fixed = note.kind == "PARAMETER" ? ir::Fixed::Trains : ir::Fixed::Buffer;
    if (!note.originalName.empty())
      init.identities.emplace_back(note.originalName);
    return;
  }
  const std::vector<std::string_view> sources = quotedNames(note.foldedFrom);
  if (sources.size() == 1) {
    const std::string spelled = placeholderSpelling(sources[0]);
    if (placeholdersSeen_.count("p_" + spelled))
      init.fixed = ir::Fixed::Trains;
    else if (placeholdersSeen_.count("b_" + spelled) || placeholdersSeen_.count("c_" + spelled))
      init.fixed = ir::Fixed::Buffer;
    else // no node names it: the module's naming decides, as without a signature
      init.fixed = fixedByExporterNote(note);
    if (init.fixed == ir::Fixed::Trains)
      init.identities = {"p_" + spelled};
    return;
  }
  if (!sources.empty()) {
    init.fixed = ir::Fixed::Folded;
    // Sources are the unoptimized graph's values: module tensors (dotted names), the exporter's
    // constants and intermediate values named after FX nodes (`arange`).
    auto knownBuffer = [&](std::string_view source) {
      const std::string spelled = placeholderSpelling(source);
      return placeholdersSeen_.count("b_" + spelled) || placeholdersSeen_.count("c_" + spelled) ||
             listedFixed.count(std::string(source));
    };
    for (std::string_view source : sources)
      if (floating && source.find('.') != std::string_view::npos && !isLiftedConstant(source) && !knownBuffer(source))
        fail("'" + std::string(name) + "' was folded from '" + std::string(source) +
             "' and constants, and nothing says whether that is a buffer or a parameter (which would then not "
             "train; tools/cleave_onnx.py lists a module's buffers)");
    return;
  }
  // No note at all: the forward's literal, written as an initializer by the optimizer.
  init.fixed = floating ? ir::Fixed::Constant : ir::Fixed::Trains;
}

const ExporterSignature::Initializer* ExporterSignature::candidate(std::string_view name) const {
  auto found = initializers_.find(name);
  return found != initializers_.end() && found->second.fixed == ir::Fixed::Trains && !found->second.identities.empty()
             ? &found->second
             : nullptr;
}

void ExporterSignature::fail(std::string why) {
  if (!untrainable_)
    untrainable_ = std::move(why);
}

// Matches the parameter inputs of one FX node's ONNX nodes to its placeholders; pairs the
// leftovers in order (distinct tensors with distinct placeholders).
void ExporterSignature::pairGroup(const FxGroup& group,
                                  std::vector<std::pair<std::string, std::string_view>>& paired) {
  std::vector<std::string_view> matched, leftover;
  for (const auto& [node, operand] : group.parameterInputs) {
    const std::string_view input = nodes_[node].inputs[operand];
    const Initializer* init = candidate(input);
    auto named = std::find_first_of(group.placeholders.begin(), group.placeholders.end(), init->identities.begin(),
                                    init->identities.end());
    if (named != group.placeholders.end())
      matched.push_back(*named);
    else if (std::find(leftover.begin(), leftover.end(), input) == leftover.end())
      leftover.push_back(input);
  }
  if (leftover.empty())
    return;
  std::vector<std::string_view> open;
  for (std::string_view placeholder : group.placeholders)
    if (placeholder.starts_with("p_") && std::find(matched.begin(), matched.end(), placeholder) == matched.end())
      open.push_back(placeholder);
  if (open.empty())
    return; // each leftover stands for a value the FX node reads (a fold of `clone(p)`), not a merge
  if (open.size() != leftover.size()) {
    fail("node '" + std::string(nodes_[group.parameterInputs.front().first].name) + "' reads '" +
         std::string(leftover.front()) + "', which the exporter's optimizer merged from a parameter its notes "
         "do not name");
    return;
  }
  for (std::size_t i = 0; i < open.size(); ++i)
    paired.emplace_back(std::string(open[i]), leftover[i]);
}

void ExporterSignature::resolve(const std::vector<std::pair<std::string_view, bool>>& initializers,
                                 const std::unordered_set<std::string>& listedFixed) {
  for (const auto& [name, floating] : initializers) {
    auto noted = initializers_.find(name);
    if (!signature_ && noted == initializers_.end())
      continue; // without a signature, an initializer without notes trains as ever
    Initializer& init = noted != initializers_.end() ? noted->second : initializers_[std::string(name)];
    init.initializer = true;
    if (signature_)
      decideFixed(name, floating, init, listedFixed);
    else
      init.fixed = fixedByExporterNote(init.note);
    folds_ += !init.note.foldedFrom.empty();
  }
  if (!signature_)
    return;
  tieFoldsToTheirSources();
  // The ONNX nodes of each FX node, in file order; nodes without an FX note that read a parameter.
  std::vector<FxGroup> groups;
  std::unordered_map<std::string_view, std::size_t> groupOf;
  std::vector<std::string_view> readWithoutNote;
  for (std::size_t n = 0; n < nodes_.size(); ++n) {
    const ExporterNodeNote& node = nodes_[n];
    FxGroup* group = nullptr;
    if (!node.fxNode.empty()) {
      auto [at, added] = groupOf.emplace(fxNodeName(node.fxNode), groups.size());
      if (added)
        groups.push_back({placeholderArguments(node.fxNode), {}, node.nameScopes});
      group = &groups[at->second];
    }
    for (std::uint32_t i = 0; i < node.inputs.size(); ++i) {
      if (!candidate(node.inputs[i]))
        continue;
      if (group)
        group->parameterInputs.emplace_back(n, i);
      else
        readWithoutNote.push_back(node.inputs[i]);
    }
  }
  // Placeholder -> the tensor it was merged into, and the group that first named it.
  std::vector<std::pair<std::string, std::string_view>> merged;
  std::unordered_map<std::string, std::pair<std::string_view, std::size_t>> targetOf;
  std::vector<std::vector<std::pair<std::string, std::string_view>>> pairedPerGroup(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    pairGroup(groups[g], pairedPerGroup[g]);
    for (const auto& [placeholder, tensor] : pairedPerGroup[g]) {
      auto [at, added] = targetOf.emplace(placeholder, std::make_pair(tensor, g));
      if (added)
        merged.emplace_back(placeholder, tensor);
      else if (at->second.first != tensor)
        fail("placeholder '" + placeholder + "' reads '" + std::string(at->second.first) + "' in one node and '" +
             std::string(tensor) + "' in another");
    }
  }
  for (std::string_view input : readWithoutNote)
    for (const auto& [placeholder, tensor] : merged)
      if (tensor == input)
        fail("a node without the exporter's notes reads '" + std::string(input) +
             "', which the optimizer merged with other parameters");
  if (untrainable_)
    return; // the model runs as exported; training stops before its first step
  // One copy per merged placeholder, named by its module path; the nodes that read it read the copy.
  std::unordered_map<std::string, std::string> copyName;
  std::unordered_set<std::string> taken;
  for (const auto& [placeholder, tensor] : merged) {
    std::string name = parameterNameOfPlaceholder(placeholder, groups[targetOf.at(placeholder).second].nameScopes);
    if (initializers_.count(name) || taken.count(name))
      name = placeholder;
    if (initializers_.count(name) || !taken.insert(name).second) {
      fail("the parameter of placeholder '" + placeholder + "' has a name the model already uses");
      return;
    }
    copyName.emplace(placeholder, name);
    copies_.emplace_back(std::string(tensor), name);
  }
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (const auto& [placeholder, tensor] : pairedPerGroup[g])
      for (const auto& [node, operand] : groups[g].parameterInputs)
        if (nodes_[node].inputs[operand] == tensor)
          rewrites_[nodeIndex_[node]].emplace_back(operand, copyName.at(placeholder));
}

// A trained fold whose one source is also a trained initializer of the graph: the module's one
// tensor, read in two forms; several folds of one source that the graph lacks would train apart.
void ExporterSignature::tieFoldsToTheirSources() {
  std::vector<std::pair<std::string, std::string>> folds; // (fold, source), in name order below
  for (auto& [name, init] : initializers_) {
    const std::vector<std::string_view> sources = quotedNames(init.note.foldedFrom);
    if (init.initializer && init.note.kind.empty() && sources.size() == 1 && init.fixed == ir::Fixed::Trains)
      folds.emplace_back(name, std::string(sources[0]));
  }
  std::sort(folds.begin(), folds.end());
  std::unordered_map<std::string, std::size_t> foldsOfAbsent;
  for (const auto& [fold, source] : folds) {
    auto held = initializers_.find(source);
    if (held != initializers_.end() && held->second.initializer && held->second.note.kind == "PARAMETER") {
      ties_.push_back({fold, source, fold + "__of_" + source});
      Initializer& folded = initializers_.find(fold)->second;
      folded.fixed = ir::Fixed::Folded;
      folded.identities.clear();
    } else if (++foldsOfAbsent[source] == 2) {
      fail("parameter '" + source + "' is read through several folds, which would train apart");
    }
  }
  std::unordered_map<std::string_view, std::string_view> tiedValue;
  for (const Tie& tie : ties_)
    tiedValue.emplace(tie.fold, tie.value);
  for (std::size_t n = 0; n < nodes_.size() && !tiedValue.empty(); ++n)
    for (std::uint32_t i = 0; i < nodes_[n].inputs.size(); ++i)
      if (auto tied = tiedValue.find(nodes_[n].inputs[i]); tied != tiedValue.end())
        rewrites_[nodeIndex_[n]].emplace_back(i, std::string(tied->second));
}

ir::Fixed ExporterSignature::fixedReason(std::string_view name) const {
  auto found = initializers_.find(name);
  return found == initializers_.end() ? ir::Fixed::Trains : found->second.fixed;
}

const std::vector<std::pair<std::uint32_t, std::string>>* ExporterSignature::rewritesOf(std::size_t index) const {
  auto found = rewrites_.find(index);
  return found == rewrites_.end() ? nullptr : &found->second;
}

} // namespace cleave::io
