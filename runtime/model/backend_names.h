// runtime/model/backend_names.h - the backends' names (runtime/model/backend.h) as plain strings,
// for code that names a backend without loading the runtime library: which name is a CUDA
// device's, and which device. O(length of the name).
#pragma once

#include <optional>
#include <string_view>

namespace cleave::runtime {

// "aten-cuda" (device 0) or "aten-cuda:N".
constexpr bool isCudaBackend(std::string_view name) {
  return name == "aten-cuda" || name.substr(0, 10) == "aten-cuda:";
}

// The CUDA device a CUDA backend's name means: 0 for "aten-cuda", N for "aten-cuda:N" (decimal,
// below 256); none when the name is not a CUDA backend's or N is not such a number.
constexpr std::optional<int> cudaDeviceOf(std::string_view name) {
  if (name == "aten-cuda")
    return 0;
  if (!isCudaBackend(name) || name.size() == 10 || name.size() > 13)
    return std::nullopt;
  int index = 0;
  for (char c : name.substr(10)) {
    if (c < '0' || c > '9')
      return std::nullopt;
    index = index * 10 + (c - '0');
  }
  return index < 256 ? std::optional<int>(index) : std::nullopt;
}

} // namespace cleave::runtime
