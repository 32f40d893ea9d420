// runtime/kernels/families.cpp - every kernel family's registration, in one list: the engine's
// kernel table (runtime/engine/kernel.h) is built from it once.
#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

void registerKernelFamilies(KernelTable& t) {
  registerElementwiseKernels(t);
  registerShapeKernels(t);
  registerNnKernels(t);
  registerAttentionKernels(t);
  registerReduceKernels(t);
  registerControlKernels(t);
  registerLossKernels(t);
  registerIndexKernels(t);
  registerQuantKernels(t);
  registerResizeKernels(t);
  registerRecurrentKernels(t);
  registerSignalKernels(t);
  registerSpatialKernels(t);
  registerSequenceKernels(t);
  registerTextKernels(t);
  registerRandomKernels(t);
}

} // namespace cleave::runtime
