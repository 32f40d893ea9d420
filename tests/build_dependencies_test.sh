#!/usr/bin/env bash
# A missing dependency stops scripts/build with one line naming its Debian package, or for
# libtorch scripts/setup (issue: fresh machines). CMake's CMAKE_DISABLE_FIND_PACKAGE_<name> stands in for the package being absent.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
failed=0 passed=0
check() { # check NAME PACKAGE: configure with NAME hidden; expect exit 1 and one line naming PACKAGE
  local dir err rc
  dir="$(mktemp -d)"
  err="$("$root/scripts/build" "$dir" "-DCMAKE_DISABLE_FIND_PACKAGE_$1=ON" 2>&1 >/dev/null)"
  rc=$?
  rm -rf "$dir"
  if [ "$rc" = 1 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] &&
    [[ "$err" == "cleave: missing dependency $1: install the Debian package $2 "* ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: hiding $1 gave exit $rc and: $err"
  fi
}
# libtorch is PyPI's, which scripts/setup installs into .libtorch: a folder without it is named.
dir="$(mktemp -d)"
err="$("$root/scripts/build" "$dir" "-DCLEAVE_TORCH_DIR=$dir/no-libtorch" 2>&1 >/dev/null)"
rc=$?
rm -rf "$dir"
if [ "$rc" = 1 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] &&
  [[ "$err" == "cleave: missing dependency Torch: no TorchConfig.cmake under $dir/no-libtorch (scripts/setup installs PyPI's torch into .libtorch)" ]]; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: a missing libtorch gave exit $rc and: $err"
fi
# ONNX's library is built by scripts/setup into .onnx: a folder without it is named.
dir="$(mktemp -d)"
err="$("$root/scripts/build" "$dir" "-DCLEAVE_ONNX_DIR=$dir/no-onnx" 2>&1 >/dev/null)"
rc=$?
rm -rf "$dir"
if [ "$rc" = 1 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] &&
  [[ "$err" == "cleave: missing dependency ONNX: no ONNX C++ library under $dir/no-onnx (scripts/setup builds it into .onnx)" ]]; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: a missing ONNX library gave exit $rc and: $err"
fi
check OpenCL ocl-icd-opencl-dev
check GTest "libgtest-dev libgmock-dev"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
