#!/usr/bin/env bash
# A missing dependency stops scripts/build with one line naming its Debian package, or for
# libtorch and ONNX's library scripts/setup (issue: fresh machines). CMake's CMAKE_DISABLE_FIND_PACKAGE_<name> stands in for the package being absent.
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
# check_folder WHAT CACHE_VARIABLE MESSAGE: configure with CACHE_VARIABLE naming a folder that does not
# exist; expect exit 1 and the one line MESSAGE, in which @ stands for that folder. libtorch and
# ONNX's library are what scripts/setup installs (.libtorch, .onnx), not Debian packages.
check_folder() {
  local dir err rc
  dir="$(mktemp -d)"
  err="$("$root/scripts/build" "$dir" "-D$2=$dir/missing" 2>&1 >/dev/null)"
  rc=$?
  rm -rf "$dir"
  if [ "$rc" = 1 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && [[ "$err" == "${3//@/$dir/missing}" ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: a missing $1 gave exit $rc and: $err"
  fi
}
check_folder libtorch CLEAVE_TORCH_DIR \
  "cleave: missing dependency Torch: no TorchConfig.cmake under @ (scripts/setup installs PyPI's torch into .libtorch)"
check_folder "ONNX library" CLEAVE_ONNX_DIR \
  "cleave: missing dependency ONNX: no ONNX C++ library under @ (scripts/setup builds it into .onnx)"
check OpenCL ocl-icd-opencl-dev
check GTest "libgtest-dev libgmock-dev"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
