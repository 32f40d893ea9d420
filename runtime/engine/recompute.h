// runtime/engine/recompute.h - selective activation recomputation inside one trainable executor run
// (cleave train --recompute selective), the policy Megatron-LM calls selective: what is expensive
// to compute and small to hold (the outputs of products with a weight: linear and convolution
// layers) is kept; what is cheap to compute and large to hold (attention's score matrices: the
// product of two activations, its scaling, mask and softmax, seq^2 per head) is dropped
// after the forward and computed again when the backward reaches it.
//
// planSelectiveRecompute cuts the executor's node order into runs of consecutive op nodes between
// weight products (a MatMul, Gemm, Conv or ConvTranspose with an operand computed from parameters
// alone), control flow (a node with a subgraph) and non-op nodes. A run holding a product of two
// activations (MatMul or Einsum, both operands depending on a graph input) is a segment. Because
// a segment is consecutive in a topological order, everything it reads was made before it and
// everything it makes for others is read after it: one autograd node can stand for it.
//
// runRecomputable runs a segment on copies of its inputs with autograd on, exactly as the plain
// forward would (the kernels take the same paths: oneDNN's direct ones only where no operand
// records the graph), and drops that graph as soon as the outputs are made; the outputs get one
// autograd node whose edges lead to the segment's inputs. When the backward reaches it, the node
// runs the segment again the same way (under the forward's autocast, so products run in the same
// precision; cleave's random kernels seed a generator of their own per node, so a replay draws
// what the forward drew) and backpropagates the gradients it received through that copy: only to
// the inputs the backward asks for (the engine's task_should_compute_output, so the split
// backward's I and W each get their side).
// Guarantees: gradients are those of the plain forward, op for op from the same derivative
// formulas (the replay computes the same values: ATen's CPU ops are deterministic); between the
// forward and the backward only the segment's inputs are held for it.
// Complexity: planning O(nodes + operands); per segment and run, one replay of the segment in
// the backward (two under a split backward when the segment also reads parameters: I and W each
// replay), plus O(values) to set up the replay's value table.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "base/expected.h"
#include "base/ids.h"
#include "ir/graph.h"

namespace cleave::runtime {

struct RecomputeSegment {
  ir::NodeId first, last;              // op nodes first..last, consecutive in node order
  std::vector<ir::ValueId> inputs;     // read in it, made before it (first read first)
  std::vector<ir::ValueId> outputs;    // made in it, read after it or a graph output
};

struct RecomputePlan {
  std::vector<RecomputeSegment> segments;     // in node order
  IdVector<ir::NodeId, std::int32_t> startsAt; // per node: the segment it starts, else -1
};

RecomputePlan planSelectiveRecompute(const ir::Graph& graph);

// Runs a segment on the given inputs (one per RecomputeSegment::inputs) and returns its outputs.
using SegmentReplay = std::function<Expected<std::vector<at::Tensor>>(const std::vector<at::Tensor>& inputs)>;

// The segment's outputs from `inputs` (the run's values; on `device`), carrying the replaying
// node. Fails as `replay` fails. `replay` must stay callable until the graph is freed.
Expected<std::vector<at::Tensor>> runRecomputable(const std::vector<at::Tensor>& inputs, SegmentReplay replay,
                                                  at::Device device);

} // namespace cleave::runtime
