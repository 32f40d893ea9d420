#include "base/expected.h"

#include <cstdio>

namespace cleave {

const char* errorCodeName(ErrorCode code) {
  switch (code) {
  case ErrorCode::InvalidArgument: return "invalid argument";
  case ErrorCode::NotFound: return "not found";
  case ErrorCode::ParseError: return "parse error";
  case ErrorCode::InvalidGraph: return "invalid graph";
  case ErrorCode::Unsupported: return "unsupported";
  case ErrorCode::DoesNotFit: return "does not fit";
  case ErrorCode::IoError: return "i/o error";
  case ErrorCode::Usage: return "usage error";
  }
  return "error";
}

void assertionFailed(const char* condition, const char* why, const char* file, int line) {
  std::fprintf(stderr, "cleave: internal error: %s (%s) at %s:%d\n", why, condition, file, line);
  std::abort();
}

} // namespace cleave
