// partition/devices.h - the devices a model is partitioned across (JSON).
//
//   {"devices": [{"name": "dev_0", "logical_id": 0, "available_mem_bytes": 125}, ...],
//    "transfer_rate_bytes_per_sec": 2.0}
//
// Fails (one-line errors naming the entry): no devices, a duplicate logical id, zero or negative
// memory, missing fields, invalid JSON.
#pragma once

#include <string>
#include <vector>

#include "base/expected.h"

namespace cleave::partition {

struct Device {
  std::string name;
  std::int64_t logicalId = 0;
  std::int64_t availableMemBytes = 0;
  std::string kind; // optional: "gpu", "npu", ...
};

struct DeviceSet {
  std::vector<Device> devices;          // in file order (the order placement decisions scan)
  double transferRateBytesPerSec = 0.0; // 0: not given
};

Expected<DeviceSet> parseDevices(std::string_view text, const std::string& sourceName);
Expected<DeviceSet> loadDevices(const std::string& path);

} // namespace cleave::partition
