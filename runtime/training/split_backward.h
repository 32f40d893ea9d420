// runtime/training/split_backward.h - one stage's backward in two parts, as zero-bubble schedules run it:
// first the gradients of the stage's inputs (I: the previous stage waits for them), later the
// gradients of its parameters (W: nothing waits for them, so a schedule fills bubbles with it).
//
// I walks the autograd graph from the stage's outputs once and splits its nodes in two: those
// from which an input (a leaf) can be reached run in I, the rest (which lead only to parameters)
// in W. Where an I node also feeds a W node (a matrix product whose other operand is a weight, a
// bias add), a pre-hook records the gradients it received in I, and W re-enters the graph at that
// node with its edges toward the inputs removed, so it computes only the weight-side outputs
// (ATen's derivative formulas skip outputs whose edge is gone).
// Guarantees: I returns the leaves' gradients of the full backward; after W every parameter has
// accumulated (.grad) what one full backward would give, from the same derivative formulas; no
// node computes an output twice.
// Complexity: O(autograd nodes + edges) for the walk, plus the backward's own work split in two.
#pragma once

#include <memory>
#include <vector>

#include "base/expected.h"
#include "runtime/engine/tensors.h"

namespace cleave::runtime {

// What I leaves for W: the graph's weight side, and where to enter it. Movable; W consumes it.
class PendingWeightBackward {
public:
  PendingWeightBackward();
  PendingWeightBackward(PendingWeightBackward&&) noexcept;
  PendingWeightBackward& operator=(PendingWeightBackward&&) noexcept;
  ~PendingWeightBackward();
  bool empty() const;

private:
  friend Expected<std::vector<at::Tensor>> backwardInputs(const std::vector<at::Tensor>&, const std::vector<at::Tensor>&,
                                                          const std::vector<at::Tensor>&, PendingWeightBackward&);
  friend Status backwardWeights(PendingWeightBackward&);
  struct State;
  std::unique_ptr<State> state_;
};

// I: backpropagates `grads` from `roots` (tensors with their autograd graph) to `leaves` only.
// Returns each leaf's gradient (undefined where none reaches it); `pending` gets the rest.
Expected<std::vector<at::Tensor>> backwardInputs(const std::vector<at::Tensor>& roots,
                                                 const std::vector<at::Tensor>& grads,
                                                 const std::vector<at::Tensor>& leaves, PendingWeightBackward& pending);
// W: accumulates the parameters' gradients that `pending` holds back, then frees its graph.
Status backwardWeights(PendingWeightBackward& pending);

} // namespace cleave::runtime
