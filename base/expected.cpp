#include "base/expected.h"

#include <cstdio>

namespace cleave {

void assertionFailed(const char* condition, const char* why, const char* file, int line) {
  std::fprintf(stderr, "cleave: internal error: %s (%s) at %s:%d\n", why, condition, file, line);
  std::abort();
}

} // namespace cleave
