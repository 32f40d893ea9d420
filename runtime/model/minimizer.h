// runtime/model/minimizer.h - the smallest set of nodes where backend B fails or disagrees with the
// reference (net_min_base's job). Candidates are the op nodes a support profile accepts, in
// topological order; a trial runs a node set on B with the reference's values as its inputs
// (lower_and_run.h), so any set can be tried, convex or not.
//   sequential  every candidate alone; each failing one is a culprit        O(N) trials
//   binary      bisect: a failing set whose halves both pass is a culprit;
//               a failing half is searched further                           O(k log N)
//   accumulate  grow a prefix one node at a time; the first failing prefix
//               makes its last node the culprit (with the prefix)            O(N)
//   block       the shortest failing run: the first end whose prefix fails
//               (binary search), then the last start whose run still fails  O(log N)
// Every reported culprit was tried and fails. Binary and block find a minimal one only when
// failing is monotone in the set (a superset of a failing set fails); otherwise a larger one.
#pragma once

#include "runtime/model/lower_and_run.h"

namespace cleave::runtime {

MinimizeResult minimize(const ReferenceRun& reference, const std::vector<ir::NodeId>& candidates, const Backend& b,
                        const AllClose& tolerance, MinimizeMode mode);

} // namespace cleave::runtime
