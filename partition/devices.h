// partition/devices.h - the devices a model is partitioned across (JSON).
//
//   {"devices": [{"name": "dev_0", "logical_id": 0, "available_mem_bytes": 125,
//                 "kind": "npu", "profile": "npu.json", "backend": "aten-cpu"}, ...],
//    "transfer_rate_bytes_per_sec": 2.0}
//
// `profile` (optional) is a support profile (support/profile.h), a path relative to the devices
// file or an inline object: the device runs only the nodes it supports (heterogeneous devices).
// `backend` (optional) names the runtime backend the device's submodules run on (`aten-cpu`,
// `aten-cpu-bf16`, `aten-cuda`, ...): the partition's plan.json keeps it, and `cleave run` lowers
// each partition on its device's backend (runtime/model/cut_model.h); without it, on `--backend`.
// `transfer_rate_bytes_per_sec` is one rate for every pair of devices, or a matrix in device
// order (row: sender, column: receiver; the diagonal is unused).
//
// Fails (one-line errors naming the entry): no devices, a duplicate logical id, zero or negative
// memory, missing fields, a profile that does not load, a matrix of the wrong size or with a
// non-positive rate, invalid JSON.
// Complexity: linear in the JSON (and in each profile it loads).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/expected.h"
#include "ir/graph.h"
#include "support/profile.h"

namespace cleave::partition {

// Limits on a devices file, so that memory sums cannot overflow (4096 x 2^50 < 2^63).
inline constexpr std::size_t kMaxDevices = 4096;
inline constexpr std::int64_t kMaxDeviceMemBytes = std::int64_t{1} << 50; // 1 PiB

struct Device {
  std::string name;
  std::int64_t logicalId = 0;
  std::int64_t availableMemBytes = 0;
  std::string kind;                               // optional: "gpu", "npu", ...
  std::string backend;                            // optional: the runtime backend its submodules run on
  std::shared_ptr<const support::Profile> profile; // null: runs every node
};

struct DeviceSet {
  std::vector<Device> devices;          // in file order (the order placement decisions scan)
  double transferRateBytesPerSec = 0.0; // 0: not given
  std::vector<std::vector<double>> transferMatrix; // empty, or devices x devices

  bool heterogeneous() const;
  std::size_t indexOf(std::int64_t logicalId) const; // devices.size() when unknown
};

// Bytes per second from one device to another: the matrix entry when there is a matrix, else
// the uniform rate.
struct TransferRates {
  double uniformBytesPerSec = 1.0;
  const DeviceSet* devices = nullptr; // for the matrix; may be null
  double between(std::int64_t fromLogicalId, std::int64_t toLogicalId) const;
};

Expected<DeviceSet> parseDevices(std::string_view text, const std::string& sourceName);
Expected<DeviceSet> loadDevices(const std::string& path);

// Which devices may run each callable node: bit d set when device d's profile supports it (all
// bits for devices without a profile). Devices beyond 64 are not supported with profiles.
struct DeviceSupport {
  IdVector<ir::NodeId, std::uint64_t> mask;
  std::uint64_t all = 0;
  bool allows(ir::NodeId node, std::size_t device) const { return (mask[node] >> device) & 1u; }
};
Expected<DeviceSupport> computeDeviceSupport(const ir::Graph& graph, const DeviceSet& devices);

} // namespace cleave::partition
