// fuzz/fuzz_target.h - what every libFuzzer target of cleave shares.
// Each target feeds the bytes to one reader of untrusted input and, when the reader accepts them,
// runs what a command would do next with the result. A reader must return an Error for anything
// it refuses: a crash, a sanitizer report, an escaped exception, a hang (-timeout) or runaway
// memory (-rss_limit_mb) is a finding. scripts/fuzz builds and runs them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

inline std::string_view fuzzText(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}
