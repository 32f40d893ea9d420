# cmake/dependencies.cmake - every external dependency of cleave, each found through cleave_require.
#
# Guarantee: a dependency that is missing stops the configure step with one line,
#   cleave: missing dependency NAME: install the Debian package PKG (scripts/setup installs them all)
# (also written to BUILD_DIR/missing-dependency.txt, which scripts/build prints alone) instead of a
# CMake trace from deep inside a package's config file. scripts/setup is the one list of packages; the names here must match it.

# A macro, not a function: find_package's result variables and imported targets must land in the
# caller's scope.
macro(cleave_stop_missing name debian_package)
  set(_cleave_missing "cleave: missing dependency ${name}: install the Debian package ${debian_package} (scripts/setup installs them all)")
  # CMake wraps messages; scripts/build prints this file's one line instead.
  file(WRITE "${CMAKE_BINARY_DIR}/missing-dependency.txt" "${_cleave_missing}\n")
  message(FATAL_ERROR "${_cleave_missing}")
endmacro()
macro(cleave_require name debian_package)
  find_package(${name} ${ARGN} QUIET)
  if(NOT ${name}_FOUND)
    cleave_stop_missing(${name} "${debian_package}")
  endif()
endmacro()

cleave_require(Protobuf "libprotobuf-dev protobuf-compiler")
cleave_require(ZLIB "zlib1g-dev")
cleave_require(ONNX libonnx-dev)
cleave_require(nlohmann_json nlohmann-json3-dev 3)
cleave_require(CLI11 libcli11-dev)

if(CLEAVE_FUZZ) # the fuzz build has no runtime
  return()
endif()

# The runtime's libtorch. CLEAVE_TORCH_DIR may point at another libtorch's CMake config (e.g. a
# CUDA-enabled one inside a pip PyTorch: python -c 'import torch; print(torch.utils.cmake_prefix_path)').
set(CLEAVE_TORCH_DIR "" CACHE PATH "directory holding TorchConfig.cmake (default: the system's)")
if(CLEAVE_TORCH_DIR)
  list(PREPEND CMAKE_PREFIX_PATH ${CLEAVE_TORCH_DIR})
endif()
cleave_require(Torch libtorch-dev)
# OpenMP, the threads of Debian's libtorch: ATen's at::parallel_for is an inline template whose
# `#pragma omp parallel` is compiled into the caller, so cleave's own kernels run in parallel only
# when cleave is compiled with OpenMP too (without it, every one of them ran on one thread).
cleave_require(OpenMP libgcc-12-dev COMPONENTS CXX)

# Gloo's headers, for c10d's ProcessGroupGloo (runtime/distributed/communicator.cpp; the library
# itself is inside libtorch). A header only, so looked for as a path.
find_path(GLOO_INCLUDE_DIR gloo/config.h)
if(NOT GLOO_INCLUDE_DIR)
  cleave_stop_missing(Gloo libgloo-dev)
endif()

# oneDNN, called directly for matrix products and convolutions (runtime/cpu/onednn.h). Debian's
# dnnl-config.cmake asks for OpenCL (its GPU runtime) as REQUIRED, which is a hard CMake error when
# ocl-icd-opencl-dev (only a Recommends of libdnnl-dev) is absent: look for OpenCL first so that
# case gets the one-line message too. CLEAVE_WITH_DNNL=OFF builds without it (products on ATen),
# e.g. against a pip libtorch on a machine without libdnnl-dev.
option(CLEAVE_WITH_DNNL "Call oneDNN (libdnnl-dev) directly for products and convolutions" ON)
if(CLEAVE_WITH_DNNL)
  cleave_require(OpenCL ocl-icd-opencl-dev)
  cleave_require(dnnl libdnnl-dev CONFIG)
endif()

if(CLEAVE_BUILD_TESTS)
  cleave_require(GTest "libgtest-dev libgmock-dev")
endif()
