// Tests of runtime/engine/device_wing.h's backend names: how a wing's indexed names map to its
// devices, and the CPU wing's names, which are the only ones a test binary has (the CUDA wing is
// a library that only the runtime library loads).
#include "runtime/engine/device_wing.h"

#include <gtest/gtest.h>

#include "runtime/model/backend.h"

namespace cleave::runtime {
namespace {

TEST(BackendNames, IndexedNamesAndTheirDevices) {
  EXPECT_EQ(deviceIndexInName("aten-cuda", "aten-cuda"), 0);
  EXPECT_EQ(deviceIndexInName("aten-cuda:0", "aten-cuda"), 0);
  EXPECT_EQ(deviceIndexInName("aten-cuda:12", "aten-cuda"), 12);
  EXPECT_EQ(deviceIndexInName("aten-cuda:255", "aten-cuda"), 255);
  for (const char* bad : {"aten-cuda:", "aten-cuda:256", "aten-cuda:1x", "aten-cuda:-1", "aten-cuda:1000", "aten-cpu",
                          "aten-cudax", "aten-cud"})
    EXPECT_EQ(deviceIndexInName(bad, "aten-cuda"), std::nullopt) << bad;
  EXPECT_TRUE(inNameFamily("aten-cuda", "aten-cuda"));
  EXPECT_TRUE(inNameFamily("aten-cuda:x", "aten-cuda"));
  EXPECT_FALSE(inNameFamily("aten-cudax", "aten-cuda"));
  EXPECT_FALSE(inNameFamily("aten-cpu", "aten-cuda"));
  // The CPU wing's names carry no index; no wing here owns aten-cuda's (its library is not loaded).
  EXPECT_EQ(devicesNamedBy("aten-cpu"), std::nullopt);
  EXPECT_EQ(devicesNamedBy("aten-cuda"), std::nullopt);
  EXPECT_EQ(devicesNamedBy(""), std::nullopt);
}

TEST(BackendNames, TheCpuWingAnswersToItsNamesAndNoOthers) {
  const std::vector<std::string> names = installedBackendNames();
  EXPECT_NE(std::find(names.begin(), names.end(), "aten-cpu"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "aten-cpu-bf16"), names.end());
  std::optional<Expected<BackendDevice>> cpu = backendDeviceNamed("aten-cpu");
  ASSERT_TRUE(cpu && *cpu);
  EXPECT_TRUE((*cpu)->device.is_cpu());
  EXPECT_FALSE((*cpu)->floatType);
  std::optional<Expected<BackendDevice>> bf16 = backendDeviceNamed("aten-cpu-bf16");
  ASSERT_TRUE(bf16 && *bf16);
  EXPECT_EQ((*bf16)->floatType, at::kBFloat16);
  EXPECT_FALSE(backendDeviceNamed("aten-cpu-fp8"));
  EXPECT_TRUE(deviceUsable(at::kCPU));
}

// The model layer makes backends from the wings' answers; a name nobody answers to lists them all.
TEST(BackendNames, UnknownBackendsListEveryName) {
  Expected<BackendDevice> profile = backendDevice("profile:any.json");
  ASSERT_TRUE(profile);
  EXPECT_TRUE(profile->device.is_cpu());
  Expected<std::unique_ptr<Backend>> unknown = makeBackend("tpu");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(unknown.error().message(),
            "unknown backend 'tpu' (backends: aten-cpu, aten-cpu-bf16, aten-cpu-as-gpu, aten-cuda[:N], profile:FILE)");
  // A bad index of a wing library's family is refused by the naming rule, before any library loads.
  Expected<std::unique_ptr<Backend>> badIndex = makeBackend("aten-cuda:one");
  ASSERT_FALSE(badIndex);
  EXPECT_EQ(badIndex.error().code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(badIndex.error().message(), "backend 'aten-cuda:one': expected aten-cuda or aten-cuda:N, N a device's index (0 to 255)");
  Expected<std::unique_ptr<Backend>> bf16 = makeBackend("aten-cpu-bf16");
  ASSERT_TRUE(bf16);
  EXPECT_EQ((*bf16)->name(), "aten-cpu-bf16");
  EXPECT_TRUE((*bf16)->device().is_cpu());
}

} // namespace
} // namespace cleave::runtime
