#include "runtime/host_memory.h"

#include <climits>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace cleave::runtime {

// glibc's largest mmap threshold: blocks up to it can come from the heap (larger ones are still
// mapped and unmapped).
constexpr int kLargestHeapBlock = 32 << 20;

bool keepFreedHostMemory() {
#if defined(__GLIBC__)
  // mallopt returns 0 where a sanitizer's allocator stands in for glibc's.
  // Both settings together: setting either one alone turns glibc's dynamic threshold off, and the
  // trim threshold alone then leaves every block over 128 KiB mapped and unmapped per step (4x the
  // faults of the defaults, measured).
  return mallopt(M_MMAP_THRESHOLD, kLargestHeapBlock) == 1 &&
         mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
#else
  return false;
#endif
}

} // namespace cleave::runtime
