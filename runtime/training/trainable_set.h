// runtime/training/trainable_set.h - what a training run trains and what it holds fixed, and why:
// the tensors of a model (or of a plan's stages together) counted once each, as `cleave train`
// prints them before its first step.
//
// A tensor trains when it is floating, owns its storage (an ONNX alias is its tensor's other
// name) and nothing holds it fixed (ir::Fixed, read by io/fixed_parameters.h): the same rule the
// executor and the pipeline trainer apply. Stages that hold copies of one tensor (tied) count it
// once, by name.
// Guarantees: trains + every fixed count + integer = the distinct tensors; `defaultRule` is true
// when some graph does not list its buffers, so a registered buffer may be among those that train;
// `shared` counts trained tensors read from more than one (non-empty) module scope.
// Complexity: O(N + E + P log P) over the graphs' nodes, edges and parameters.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "base/expected.h"
#include "ir/graph.h"

namespace cleave::runtime {

struct TrainableSet {
  std::int64_t trains = 0, trainedBytes = 0;
  std::map<ir::Fixed, std::int64_t> fixed; // by reason, reasons with none left out
  std::int64_t integer = 0;                // not floating: never trained
  // Of the fixed running statistics, those training forwards update (running_statistics.h).
  std::int64_t updated = 0;
  bool defaultRule = false;
  // Trained tensors that nodes of more than one module scope read: each trains as one tensor, its
  // gradients summed (a tied weight; or, in an eval-mode TorchScript export, parameters of equal
  // value that the exporter merged into one initializer). The first by name, with its scopes.
  std::int64_t shared = 0;
  std::string sharedExample;
  std::int64_t sharedExampleScopes = 0;
  // Initializers onnxscript's optimizer folded (ModelInfo::exporterFolds): an optimized dynamo
  // export, whose initializers are not exactly the module's parameters; and the parameters it
  // merged by value that train apart again.
  std::int64_t exporterFolds = 0, mergesSplit = 0;
  // Under the default rule, trained tensors of at most one element (a literal an exporter wrote
  // as an initializer looks like this), the first by name.
  std::int64_t possiblyConstant = 0;
  std::string possiblyConstantExample;
};

// Whether `param` trains: it owns its storage, is floating and nothing holds it fixed (the one
// rule; the pipeline trainer's messages and checks use it too).
bool trains(const ir::Graph& graph, ir::ParamId param);

TrainableSet trainableSet(std::span<const ir::Graph* const> graphs);

// Fails (InvalidArgument, one line) when a graph cannot train as its module would: parameters
// its exporter merged that reading could not tell apart (ir::ModelInfo::untrainable). Training
// calls it before anything else, so the run stops before its first step.
Status checkTrainableAsExported(std::span<const ir::Graph* const> graphs);

} // namespace cleave::runtime
