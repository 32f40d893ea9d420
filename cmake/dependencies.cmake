# cmake/dependencies.cmake - every external dependency of cleave, each found through cleave_require.
#
# Guarantee: a dependency that is missing stops the configure step with one line,
#   cleave: missing dependency NAME: install the Debian package PKG (scripts/setup installs them all)
# or, for libtorch (PyPI's wheel, not a Debian package), one naming scripts/setup's .libtorch
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
# ONNX's C++ library: built by scripts/onnx-library from PyPI's source of the onnx release the
# Python side pins, into the clone's .onnx (scripts/setup), or the one CLEAVE_ONNX_DIR names (its
# lib/cmake/ONNX). Found there only: Debian's libonnx 1.12, if installed, stops at opset 17.
set(CLEAVE_ONNX_DIR "${CMAKE_CURRENT_SOURCE_DIR}/.onnx" CACHE PATH "prefix of ONNX's C++ library (scripts/onnx-library)")
# Forced: a build folder configured against another ONNX keeps its ONNX_DIR in the cache.
set(ONNX_DIR "${CLEAVE_ONNX_DIR}/lib/cmake/ONNX" CACHE PATH "ONNX's CMake config (cmake/dependencies.cmake)" FORCE)
find_package(ONNX CONFIG QUIET NO_DEFAULT_PATH)
if(NOT ONNX_FOUND OR NOT TARGET ONNX::onnx)
  set(_cleave_missing "cleave: missing dependency ONNX: no ONNX C++ library under ${CLEAVE_ONNX_DIR} (scripts/setup builds it into .onnx)")
  file(WRITE "${CMAKE_BINARY_DIR}/missing-dependency.txt" "${_cleave_missing}\n")
  message(FATAL_ERROR "${_cleave_missing}")
endif()
cleave_require(nlohmann_json nlohmann-json3-dev 3)
cleave_require(CLI11 libcli11-dev)

if(CLEAVE_FUZZ) # the fuzz build has no runtime
  return()
endif()

# The runtime's libtorch: PyPI's torch wheel, which scripts/setup installs as files into the
# clone's .libtorch (scripts/requirements-libtorch.txt), or another libtorch's CMake config named by
# CLEAVE_TORCH_DIR (the GPU machines' own pip PyTorch: python3 -c 'import torch;
# print(torch.utils.cmake_prefix_path)'). One libtorch serves the build (docs/architecture.md,
# "Builds"): Debian's 1.13 is no longer built against.
set(CLEAVE_TORCH_DIR "" CACHE PATH "directory holding Torch/TorchConfig.cmake (default: .libtorch/torch/share/cmake)")
if(CLEAVE_TORCH_DIR)
  set(_cleave_torch_prefix "${CLEAVE_TORCH_DIR}")
else()
  set(_cleave_torch_prefix "${CMAKE_CURRENT_SOURCE_DIR}/.libtorch/torch/share/cmake")
endif()
if(NOT EXISTS "${_cleave_torch_prefix}/Torch/TorchConfig.cmake")
  set(_cleave_missing "cleave: missing dependency Torch: no TorchConfig.cmake under ${_cleave_torch_prefix} (scripts/setup installs PyPI's torch into .libtorch)")
  file(WRITE "${CMAKE_BINARY_DIR}/missing-dependency.txt" "${_cleave_missing}\n")
  message(FATAL_ERROR "${_cleave_missing}")
endif()
# Forced: a build folder configured against another libtorch keeps its *_DIR in the cache.
set(Torch_DIR "${_cleave_torch_prefix}/Torch" CACHE PATH "libtorch's CMake config (cmake/dependencies.cmake)" FORCE)
set(Caffe2_DIR "${_cleave_torch_prefix}/Caffe2" CACHE PATH "libtorch's CMake config (cmake/dependencies.cmake)" FORCE)
# libtorch's CMake config looks for CUDA by enabling CMake's CUDA language (Caffe2's
# public/cuda.cmake), which compiles probe programs with nvcc; cleave compiles no CUDA code, and a
# machine that builds it need not compile CUDA (a fresh root's read-only toolkit failed that
# probe). A pip wheel carries CUDA's runtime headers and library beside torch (nvidia/cu13, or
# nvidia/cuda_runtime for CUDA 12): torch::cudart is made from those, and the config, finding that
# target defined, takes CUDA as found without probing. Elsewhere the config probes as it will.
# The headers must be whole: cuda_runtime.h includes crt/host_config.h, which the wheels ship apart
# (nvidia-cuda-crt), and an install without it (the GPU machines' image) takes the toolkit's
# headers instead, of the same CUDA release as the wheel's libcudart.
get_filename_component(_cleave_torch_site "${_cleave_torch_prefix}/../../.." ABSOLUTE)
find_path(CLEAVE_CUDART_INCLUDE NAMES crt/host_config.h NO_DEFAULT_PATH
          PATHS "${_cleave_torch_site}/nvidia/cu13/include" "${_cleave_torch_site}/nvidia/cuda_runtime/include"
                "$ENV{CUDA_HOME}/include" /usr/local/cuda/include)
find_library(CLEAVE_CUDART_LIBRARY NAMES libcudart.so.13 libcudart.so.12 NO_DEFAULT_PATH
             PATHS "${_cleave_torch_site}/nvidia/cu13/lib" "${_cleave_torch_site}/nvidia/cuda_runtime/lib")
set(CLEAVE_TORCH_CUDA_VERSION "")
if(CLEAVE_CUDART_INCLUDE AND CLEAVE_CUDART_LIBRARY AND NOT TARGET torch::cudart)
  add_library(torch::cudart INTERFACE IMPORTED)
  set_target_properties(torch::cudart PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CLEAVE_CUDART_INCLUDE}"
                                                 INTERFACE_LINK_LIBRARIES "${CLEAVE_CUDART_LIBRARY}")
  file(STRINGS "${CLEAVE_CUDART_INCLUDE}/cuda_runtime_api.h" _cleave_cudart REGEX "^#define CUDART_VERSION +[0-9]+")
  string(REGEX REPLACE "^#define CUDART_VERSION +([0-9]+).*" "\\1" _cleave_cudart "${_cleave_cudart}")
  math(EXPR _cleave_cuda_major "${_cleave_cudart} / 1000")
  math(EXPR _cleave_cuda_minor "(${_cleave_cudart} % 1000) / 10")
  set(CLEAVE_TORCH_CUDA_VERSION "${_cleave_cuda_major}.${_cleave_cuda_minor}")
elseif(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  # The config's probe also runs a program for the GPU's architecture unless it is named; 9.0 is
  # the H100/H200's (cleave compiles no CUDA source, so it only quiets the probe).
  set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
endif()
find_package(Torch QUIET)
if(NOT Torch_FOUND OR NOT TARGET torch_cpu)
  set(_cleave_missing "cleave: libtorch under ${_cleave_torch_prefix} does not configure (run CMake with --debug-find, or scripts/setup again)")
  file(WRITE "${CMAKE_BINARY_DIR}/missing-dependency.txt" "${_cleave_missing}\n")
  message(FATAL_ERROR "${_cleave_missing}")
endif()
set(CLEAVE_TORCH_VERSION "${Torch_VERSION}")
if(NOT CLEAVE_TORCH_CUDA_VERSION AND TARGET torch_cuda AND DEFINED CUDAToolkit_VERSION) # the config probed
  set(CLEAVE_TORCH_CUDA_VERSION "${CUDAToolkit_VERSION}")
endif()

# The wheel's include/ holds, beside ATen, c10 and torch, the protobuf and oneDNN headers libtorch
# was built with. ONNX's library (built against Debian's protobuf) and libdnnl need their own versions of both, and an -I folder
# wins over /usr/include: so the runtime sees the wheel's headers through a folder of links to
# everything but google/ (protobuf), dnnl*.h* and oneapi/ (oneDNN).
get_target_property(_cleave_torch_includes torch_cpu INTERFACE_INCLUDE_DIRECTORIES)
list(GET _cleave_torch_includes 0 _cleave_torch_include)
set(CLEAVE_TORCH_INCLUDE "${CMAKE_BINARY_DIR}/torch-include")
file(REMOVE_RECURSE "${CLEAVE_TORCH_INCLUDE}")
file(MAKE_DIRECTORY "${CLEAVE_TORCH_INCLUDE}")
file(GLOB _cleave_torch_entries RELATIVE "${_cleave_torch_include}" "${_cleave_torch_include}/*")
foreach(entry IN LISTS _cleave_torch_entries)
  if(NOT entry MATCHES "^(google|oneapi|dnnl.*)$")
    file(CREATE_LINK "${_cleave_torch_include}/${entry}" "${CLEAVE_TORCH_INCLUDE}/${entry}" SYMBOLIC)
  endif()
endforeach()
foreach(target IN ITEMS torch torch_cpu c10 torch_cuda c10_cuda headeronly)
  if(TARGET ${target})
    set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES
      "${CLEAVE_TORCH_INCLUDE};${CLEAVE_TORCH_INCLUDE}/torch/csrc/api/include")
  endif()
endforeach()
# What a CPU-only binary links: libtorch_cpu and libc10, never libtorch.so (which needs
# libtorch_cuda, and so cuDNN, cuBLAS and NCCL, in every process).
set(CLEAVE_TORCH_CPU_LIBRARIES torch_cpu c10)
# The wheel's libtorch_cpu exports some std::filesystem functions of its own (another libstdc++'s):
# a binary that lists libtorch before libstdc++ resolves remove_all to that copy, which crashes on
# this libstdc++'s directory entries. libstdc++ first among every binary's needed libraries.
add_link_options("LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")

# The CUDA wing (runtime/cuda/) builds where libtorch has CUDA: its libraries, and NCCL, the one
# libtorch_cuda loads (the wheel's nvidia-nccl; a second NCCL in one process would not share its
# communicators' state).
option(CLEAVE_CUDA_WING "Build the CUDA wing (libcleave_cuda.so) where libtorch has CUDA" ON)
if(CLEAVE_CUDA_WING AND TARGET torch_cuda AND TARGET c10_cuda)
  get_filename_component(_cleave_torch_root "${_cleave_torch_include}/../.." ABSOLUTE)
  find_path(CLEAVE_NCCL_INCLUDE nccl.h NO_DEFAULT_PATH PATHS "${_cleave_torch_root}/nvidia/nccl/include")
  find_library(CLEAVE_NCCL_LIBRARY NAMES nccl libnccl.so.2 NO_DEFAULT_PATH PATHS "${_cleave_torch_root}/nvidia/nccl/lib")
  if(CLEAVE_NCCL_INCLUDE AND CLEAVE_NCCL_LIBRARY)
    set(CLEAVE_HAS_CUDA_WING ON)
    file(STRINGS "${CLEAVE_NCCL_INCLUDE}/nccl.h" _cleave_nccl_version REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE "[^0-9;]" "" _cleave_nccl_version "${_cleave_nccl_version}")
    string(REPLACE ";" "." CLEAVE_NCCL_VERSION "${_cleave_nccl_version}")
  else()
    message(WARNING "cleave: libtorch has CUDA but its NCCL (nvidia/nccl beside torch) is missing: no CUDA wing")
  endif()
endif()

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
