// simplify/affine_index.h - integer index tensors that are affine in their positions,
// index[i0, ..., ik] = offset + sum_j stride_j * i_j, where a dim may be a symbolic one (a dynamic
// batch). torch.export writes a contiguous as_strided view as a Gather of the flattened data by
// such indices: Range(0, n) * stride per dim, Unsqueezed into place and Added (swin_t's flatten).
// Static, the indices fold to a constant; with a symbolic batch they do not, and recognizing them
// here is what lets simplify/shape_folding.h see that the Gather reads its data in order.
//
// affineIndexOf recognizes: a known integer constant that is affine (checked element by element);
// Range(start, limit, delta) with constant start and delta, and a constant limit or, for
// Range(0, n, 1), a limit that is one dim of a value (Squeeze or Gather of a Shape), symbolic or
// not; Mul by a constant scalar; Add of two affine operands (broadcast, a symbolic dim meeting
// only itself or 1); Unsqueeze. Anything else is not recognized (nullopt).
// Guarantees: a result describes every element of the value exactly; a symbolic dim is the
// graph's symbol id, so two equal ids are the same extent in every run.
// Complexity: O(elements of the constants read + the nodes of the index computation).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "ir/graph.h"
#include "simplify/constant.h"

namespace cleave::simplify {

// One dim's extent: `extent` >= 0, or the graph's symbol id `symbol` (non-zero).
struct IndexExtent {
  std::int64_t extent = -1;
  std::uint32_t symbol = 0;
  friend bool operator==(const IndexExtent&, const IndexExtent&) = default;
};

struct AffineIndex {
  std::vector<IndexExtent> dims;
  std::vector<std::int64_t> strides; // one per dim; a dim of extent 1 has stride 0
  std::int64_t offset = 0;
};

// The constant a value holds, if known (the folding plan's known values).
using KnownConstant = std::function<const Constant*(ir::ValueId)>;

std::optional<AffineIndex> affineIndexOf(const ir::Graph& graph, ir::ValueId value, const KnownConstant& known);

// Whether `index` enumerates 0, 1, 2, ... in row-major order: offset 0 and row-major strides for
// its dims (only the outermost dim that is not 1 may be symbolic).
bool enumeratesInOrder(const AffineIndex& index);

// The element count of a value's dims as a static product and the symbols' ids (sorted), for
// comparing counts where some dims are symbolic.
struct SymbolicCount {
  std::int64_t product = 1;
  std::vector<std::uint32_t> symbols;
  friend bool operator==(const SymbolicCount&, const SymbolicCount&) = default;
};
SymbolicCount countOf(const std::vector<IndexExtent>& dims);

} // namespace cleave::simplify
