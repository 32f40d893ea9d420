// runtime/engine/value_placement.h - which values an executor keeps in host memory and which on
// its device, decided once when the executor is made.
//
// Why: ATen lets a device tensor meet only a 0-dim host tensor, and an ONNX export computes its
// reshape targets and slice bounds while it runs (Shape -> Gather -> Unsqueeze -> Concat ->
// Reshape), in int64 arithmetic that a kernel reads back into C++ numbers. Run on the device, each
// such node is a launch and each read a synchronizing copy back; mixed, a Gather of a host shape
// by a device index fails. ONNX Runtime's answer, followed here: kernels declare which operands
// they read on the host (kernel.h, OperandMemory), small shape arithmetic runs on the host, and a
// value is copied only where it crosses, once per value and run.
//
// The rules, in topological order:
//   - graph inputs live on the device;
//   - Shape and Size read only their operand's sizes and make their result on the host;
//   - a *small constant* (a Constant node, or an integer or bool parameter, of at most
//     kSmallElements elements) lives on the host when any reader reads it there, else on the device;
//   - an op of the shape-arithmetic list (integer and comparison elementwise ops, Cast, Gather,
//     Concat, Slice, Unsqueeze, Squeeze, Reshape, Identity, small reductions) whose operands all
//     live on the host (or are small constants) runs on the host: its results are as small as its
//     operands;
//   - any op (Range, ConstantOfShape, Expand, Transpose...) in a chain that reads only values made
//     on the host and is read only on the host (or for its sizes) runs on the host too: a Swin
//     block's padding and mask arithmetic (the largest such set; no op with a subgraph);
//   - every other op runs on the device and makes its results there; the operands its kernel
//     reads on the host are handed over on the host;
//   - any other parameter lives on the host only when every reader reads it there.
// A reader on the other side than a value's gets a copy: made once per run for values ops make,
// once per executor for parameters and constants (which do not change between runs).
//
// Guarantees: deterministic; every op node and value gets one side; the placement depends on the
// graph and the kernels' declared operand memory only (not on the device), so it is computed and
// tested without one. Complexity: O(nodes + edges).
#pragma once

#include <cstdint>
#include <vector>

#include "base/ids.h"
#include "ir/graph.h"
#include "runtime/engine/kernel.h"

namespace cleave::runtime {

enum class Side : std::uint8_t { Device, Host };

// The side a reader takes an operand on: Either for an operand read for its sizes alone.
enum class ReadSide : std::uint8_t { Device, Host, Either };

struct ValuePlacement {
  static constexpr std::int64_t kSmallElements = 64;
  IdVector<ir::NodeId, Side> nodeSide;   // where each node runs (inputs and parameters: where they bind)
  std::vector<Side> valueSide;           // per value: where it is made
};

// `kernels`: every op node's kernel entry (Executor::create resolves them first).
ValuePlacement placeValues(const ir::Graph& graph, const IdVector<ir::NodeId, KernelEntry>& kernels);

// Where `reader` (running on `readerSide` with kernel `kernel`) takes its operand `k`.
ReadSide operandReadSide(Side readerSide, const KernelEntry& kernel, std::size_t k);

// Whether a value made on `made` must be copied for a read on `read`.
inline bool crosses(Side made, ReadSide read) {
  return read != ReadSide::Either && (read == ReadSide::Host) != (made == Side::Host);
}

// The operand reads that cross sides in one unfused run: (reader, operand index) pairs, in node
// order. What a run on a device with its own memory copies (parameters and constants once per
// executor instead). For tests and reports. O(edges).
struct Crossing {
  ir::NodeId reader;
  std::uint32_t operand;
  ir::ValueId value;
};
std::vector<Crossing> crossingReads(const ir::Graph& graph, const IdVector<ir::NodeId, KernelEntry>& kernels,
                                    const ValuePlacement& placement);

} // namespace cleave::runtime
