// io/exporter_signature.h - what torch.onnx's dynamo exporter says of a model's tensors: which
// train, and the parameters its optimizer merged by value, given back their own tensors.
//
// The exporter (torch 2.x, `dynamo=True`) notes the ExportedProgram's signature on each
// initializer's value_info (`InputSpec.kind`: PARAMETER, BUFFER, CONSTANT_TENSOR; the FX
// placeholder's name, `original_node_name`), where onnxscript's optimizer (`optimize=True`, the
// default) folded a value (`folded_from`), and, on each node, the FX node it came from
// (`pkg.torch.onnx.fx_node`: its placeholder arguments, `%p_blocks_0_ln1_weight`) and its module
// scopes (`pkg.torch.onnx.name_scopes`). The optimizer also writes the forward's float literals
// (a scale, an exponent, 1/sqrt(d)) as initializers with no note, and merges initializers of
// equal value into one: every fresh LayerNorm's weight of ones becomes one tensor.
//
// The rule, when some initializer carries a signature kind (docs/distributed.md, "What trains"):
//  - a PARAMETER trains; a BUFFER or CONSTANT_TENSOR is a buffer;
//  - a fold of exactly one source trains in that source's place when the source is a parameter
//    (its placeholder `p_...` is an argument of some node; without node notes, a dotted module
//    name), is a buffer when the source is one (`b_...`, `c_...`), else `folded`;
//  - a fold of several sources is `folded`: made of constants, or of a buffer sliced, gathered or
//    compared with constants. A floating one with a source that names a module tensor (a dotted
//    name) not known as a buffer (a `b_`/`c_` placeholder, or listed in the model's
//    cleave.fixed_parameters) may be a parameter's gather (a position embedding at fixed
//    positions), which would then not train: the notes cannot tell, so untrainable() says so.
//    (An undotted source, a top-level tensor or an FX node's value alike, is not judged.)
//  - any other initializer is the exporter's literal: `constant`.
// A merge is undone per FX node: its ONNX nodes' parameter inputs are matched to its placeholder
// arguments by name (`original_node_name`, or `p_` + a fold's source); inputs left over are
// paired with the placeholders left over, in order, when there are as many of each (with no
// placeholder left over, a leftover is a value the FX node computed, which the optimizer
// folded). Each placeholder so paired gets its own copy of the tensor it was merged into (same
// bytes, its own name: its module path from the node's scopes), read by exactly the nodes that
// read it. Where the notes cannot say (a node without notes reads a merged tensor; leftovers
// that do not pair; a placeholder paired with two tensors) the model runs as exported and
// `untrainable()` says why.
// A fold of one parameter that the graph also reads as it is (tied) is computed again from it
// (ties()), so that the two stay one tensor. Without a signature (no kind noted), only folds are
// judged, by fixedByExporterNote.
//
// Guarantees: deterministic (the same file gives the same copies, names and rewrites, in file
// order); a rewrite changes only which tensor of equal value a node reads, so every output is
// unchanged. Complexity: O(nodes + inputs + initializers) expected time, plus the notes' length.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace cleave::io {

// The notes' keys: on an initializer's value_info (IR 10's metadata_props), the signature's kind,
// the FX placeholder's name and a fold's sources (a Python list's text); on a node, its FX node
// and its module scopes.
inline constexpr std::string_view kExportedKindKey = "pkg.torch.export.graph_signature.InputSpec.kind";
inline constexpr std::string_view kOriginalNodeNameKey = "pkg.torch.onnx.original_node_name";
inline constexpr std::string_view kFoldedFromKey = "pkg.onnxscript.optimizer.folded_from";
inline constexpr std::string_view kFxNodeKey = "pkg.torch.onnx.fx_node";
inline constexpr std::string_view kNameScopesKey = "pkg.torch.onnx.name_scopes";

// The notes of one initializer's value_info (views into the model file).
struct ExporterTensorNote {
  std::string_view kind, foldedFrom, originalName;
};

// Why such an initializer is held fixed without a signature (folds only): a fold of module
// tensors trains as the tensor it stands for, one of constants and temporaries is `folded`.
ir::Fixed fixedByExporterNote(const ExporterTensorNote& note);

// One node's notes (views into the model file); `inputs` in operand order.
struct ExporterNodeNote {
  std::string_view name, fxNode, nameScopes;
  std::vector<std::string_view> inputs;
};

class ExporterSignature {
public:
  // Reading, in file order: every initializer's notes, then (with a signature) every node's.
  void noteInitializer(std::string_view name, const ExporterTensorNote& note);
  bool carriesSignature() const { return signature_; }
  void noteNode(std::size_t index, const ExporterNodeNote& node);

  // Decides, once every note is in: each initializer's reason, the copies and the rewrites.
  // `initializers`: the model's initializers (name and floating or not), in file order;
  // `listedFixed`: the tensors the model's own cleave.fixed_parameters entry holds fixed.
  void resolve(const std::vector<std::pair<std::string_view, bool>>& initializers,
               const std::unordered_set<std::string>& listedFixed);

  // Why training holds initializer `name` fixed (Trains: it trains).
  ir::Fixed fixedReason(std::string_view name) const;
  // For node `index`: (operand position, name of the copy it reads instead).
  const std::vector<std::pair<std::uint32_t, std::string>>* rewritesOf(std::size_t index) const;
  // The copies to add: (initializer whose bytes and type it takes, the copy's name), in order.
  const std::vector<std::pair<std::string, std::string>>& copies() const { return copies_; }
  // Folds of a parameter that the graph also reads as it is (a tied embedding and its transposed
  // head): one tensor in the module, so the fold is computed again from the parameter, as
  // Transpose(source) into `value`, which the fold's readers read instead (the fold, read by no
  // one, is held fixed). In file order.
  struct Tie {
    std::string fold, source, value;
  };
  const std::vector<Tie>& ties() const { return ties_; }
  // Stops training (see untrainable()) for a reason the reader finds, such as a tie that is not a
  // transpose.
  void refuseTraining(std::string why) { fail(std::move(why)); }
  // Set when a merge cannot be undone from the notes: training must stop before its first step.
  const std::optional<std::string>& untrainable() const { return untrainable_; }
  std::uint32_t folds() const { return folds_; }

private:
  struct Initializer {
    ExporterTensorNote note;
    std::vector<std::string> identities; // the placeholders it may stand for (`p_a_b`, ...)
    ir::Fixed fixed = ir::Fixed::Trains;
    bool initializer = false; // a value_info may note a value that no initializer holds
  };
  struct FxGroup { // the ONNX nodes of one FX node
    std::vector<std::string_view> placeholders;
    std::vector<std::pair<std::size_t, std::uint32_t>> parameterInputs; // (node, operand)
    std::string_view nameScopes;
  };
  const Initializer* candidate(std::string_view name) const;
  void decideFixed(std::string_view name, bool floating, Initializer& init,
                   const std::unordered_set<std::string>& listedFixed);
  void pairGroup(const FxGroup& group, std::vector<std::pair<std::string, std::string_view>>& paired);
  void fail(std::string why);
  void tieFoldsToTheirSources();

  struct NameHash { // lookups by view, keys owned
    using is_transparent = void;
    std::size_t operator()(std::string_view name) const { return std::hash<std::string_view>()(name); }
  };

  bool signature_ = false;
  std::unordered_map<std::string, Initializer, NameHash, std::equal_to<>> initializers_;
  std::vector<ExporterNodeNote> nodes_; // with fx notes, by index order
  std::vector<std::size_t> nodeIndex_;
  std::unordered_set<std::string_view> placeholdersSeen_; // every placeholder argument of any node
  std::unordered_map<std::size_t, std::vector<std::pair<std::uint32_t, std::string>>> rewrites_;
  std::vector<std::pair<std::string, std::string>> copies_;
  std::vector<Tie> ties_;
  std::optional<std::string> untrainable_;
  std::uint32_t folds_ = 0;
};

// "p_blocks_0_ln1_weight" with scopes "['', 'blocks.0', 'blocks.0.ln1', 'layer_norm']" ->
// "blocks.0.ln1.weight": the deepest scope whose name, dots as underscores, prefixes the
// placeholder's; else the placeholder's name without its `p_`.
std::string parameterNameOfPlaceholder(std::string_view placeholder, std::string_view nameScopes);

} // namespace cleave::io
