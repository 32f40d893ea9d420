// runtime/engine/small_op_memo.h - results of shape arithmetic, remembered from one run to the next.
//
// Why: exporters compute reshape targets and slice bounds while the model runs, from the shapes of
// its values: Shape -> Gather -> Add -> Div -> Mul -> Slice (ShuffleNet's chunk), Shape -> Gather
// -> Unsqueeze -> Concat -> Reshape (a transformer's heads). Each node is an ATen call or several
// of 2-20 us on a handful of int64s (ShuffleNetV2: 13 Gathers, 0.29 ms a run), and their answers
// repeat run after run, as do Constant nodes' tensors, parsed from the model on every run.
//
// Guarantees: a node's results are reused only when
// - its op is pure: its results depend on its operands' values and its attributes alone (an
//   allowlist; nothing random, nothing reading a shape, sequence or subgraph);
// - every operand is a defined number or bool tensor, dense, on the CPU, not recording autograd, of at most
//   kMaxElements elements, and equals (dtype, sizes, bytes) the one it was last computed from;
// - every result had at most kMaxElements elements.
// Remembered operands and results are private copies; reused results are shared tensors, which no
// kernel overwrites in place (KernelContext::mayOverwrite sees a second owner). Small host values'
// device copies are remembered the same way (recallCopy).
// Cost: per run of a node it allows, O(operands' bytes) to compare, and a copy of operands and
// results when they changed; nothing for other nodes.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "base/ids.h"
#include "ir/graph.h"

namespace cleave::runtime {

class SmallOpMemo {
public:
  static constexpr std::int64_t kMaxElements = 64;

  SmallOpMemo() = default;
  explicit SmallOpMemo(const ir::Graph& graph); // which nodes' ops are pure

  // Whether `node` may be remembered with these operands (pure op, all operands small).
  bool applies(ir::NodeId node, const std::vector<at::Tensor>& operands) const;
  // The results remembered for `node` when they were computed from operands equal to these.
  const std::vector<at::Tensor>* recall(ir::NodeId node, const std::vector<at::Tensor>& operands) const;
  // Keeps copies of the operands and results of a run of `node`, when the results are small too.
  void remember(ir::NodeId node, const std::vector<at::Tensor>& operands, const std::vector<at::Tensor>& results);

  // The same for a small host value that a device op reads (value_placement.h's crossings, such as
  // an attention's scale computed from a shape): its copy on the device, when it was made from a
  // host value equal to `host` (the rule above). Why: a copy from pageable host memory waits for
  // every kernel queued before it, so one such copy per layer kept a GPU from running ahead of
  // the host (BERT-base: 12 a run); and a CUDA graph cannot record it.
  const at::Tensor* recallCopy(ir::ValueId value, const at::Tensor& host) const;
  void rememberCopy(ir::ValueId value, const at::Tensor& host, const at::Tensor& copy);

private:
  struct Entry {
    bool valid = false;
    std::vector<at::Tensor> operands, results;
  };
  IdVector<ir::NodeId, std::uint8_t> pure_; // 1 for a pure op
  IdVector<ir::NodeId, Entry> entries_;
  struct Copy {
    at::Tensor host, device; // undefined: none kept
  };
  IdVector<ir::ValueId, Copy> copies_;
};

} // namespace cleave::runtime
