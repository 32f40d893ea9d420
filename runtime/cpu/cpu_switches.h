// runtime/cpu/cpu_switches.h - the CPU wing's optimizations a run may turn off (WingSwitch,
// runtime/engine/optimizations.h): constants only, nothing of ATen or oneDNN, so the CLI makes
// their flags without loading the runtime. The wing reads them when it plans an executor's
// weights (cpu_wing.cpp). O(1).
#pragma once

#include "runtime/engine/optimizations.h"

namespace cleave::runtime::cpu {

// Hold a float32 weight that only MatMuls (as their right operand) or Linear-form Gemms read packed,
// as the only copy (onednn::PackedWeight: oneDNN's product layout on AVX-512, cleave's panels on
// AVX2), and one that only convolutions read in the
// layouts their primitives want, without the plain one once a copy converts back
// (onednn::holdOnlyReordered).
inline constexpr WingSwitch kPackedWeights{
    "packed-weights", true,
    "keep a weight that only MatMuls or Linear-form Gemms read as [N, K] rows read in place by oneDNN, not packed "
    "(oneDNN's product layout on AVX-512, cleave's own AVX2 kernel's panels elsewhere), and a "
    "weight that only Convs read plain beside its reordered copies (by default the packed or reordered copies are "
    "the only ones)"};
// Let 3x3 convolutions run as Winograd's where it pays (onednn::usesWinograd): faster, but its
// weights are 1.8-4x the plain ones.
inline constexpr WingSwitch kWinograd{
    "winograd", true,
    "run 3x3 convolutions on oneDNN's direct kernel only: less memory (Winograd's weights are 1.8-4x the plain "
    "ones), usually slower"};
// Let 2-D convolutions with kernels larger than 1x1 run in oneDNN's blocked layout, with reorders
// around them, where its channels-last kernel is not a native one (onednn::runsBlocked: AVX2).
inline constexpr WingSwitch kBlockedConvolutions{
    "blocked-convolutions", true,
    "run every direct convolution channels-last (by default, where oneDNN's channels-last kernel is not a native "
    "one, as on AVX2, convolutions with kernels larger than 1x1 run in its blocked layout with reorders around "
    "them)"};

inline constexpr WingSwitch kSwitches[] = {kPackedWeights, kWinograd, kBlockedConvolutions};

} // namespace cleave::runtime::cpu
