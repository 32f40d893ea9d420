// Tests of runtime/model/backend_names.h: which names are CUDA backends, and which device.
#include "runtime/model/backend_names.h"

#include <gtest/gtest.h>

namespace cleave::runtime {
namespace {

TEST(BackendNames, CudaNamesAndTheirDevices) {
  EXPECT_TRUE(isCudaBackend("aten-cuda"));
  EXPECT_TRUE(isCudaBackend("aten-cuda:3"));
  EXPECT_FALSE(isCudaBackend("aten-cpu"));
  EXPECT_FALSE(isCudaBackend("aten-cudax"));
  EXPECT_EQ(cudaDeviceOf("aten-cuda"), 0);
  EXPECT_EQ(cudaDeviceOf("aten-cuda:0"), 0);
  EXPECT_EQ(cudaDeviceOf("aten-cuda:12"), 12);
  EXPECT_EQ(cudaDeviceOf("aten-cuda:255"), 255);
  for (const char* bad : {"aten-cuda:", "aten-cuda:256", "aten-cuda:1x", "aten-cuda:-1", "aten-cuda:1000", "aten-cpu"})
    EXPECT_EQ(cudaDeviceOf(bad), std::nullopt) << bad;
}

} // namespace
} // namespace cleave::runtime
