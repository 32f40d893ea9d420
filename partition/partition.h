// partition/partition.h - the one entry point for multi-device partitioning: pick a mode, cut the
// graph, optionally replicate onto idle devices, and measure the result (memory per device; with
// node latencies, per-partition latency and the critical path). The CLI and bench call this;
// the modes themselves live in one file each (size_based.h, sparse_nn.h, cost_aware.h,
// kl_based.h, optimal.h, aot_and_replicas.h).
// Guarantees: every callable node in exactly one partition; partitions in an order whose graph
// runs forward; the measurements are those of the returned plan. Complexity: the mode's own,
// plus O(V + E) for boundaries and latencies and O(P + partition edges) for the critical path.
#pragma once

#include <optional>
#include <string>

#include "base/enum_table.h"
#include "partition/latency.h"
#include "partition/optimal.h"
#include "partition/partition_result.h"
#include "plan/materialize.h"

namespace cleave::partition {

enum class PartitionMode : std::uint8_t { SizeBased, SparseNn, CostAware, KlBased, Optimal, AotBased };
inline constexpr auto kPartitionModes = enumTable<PartitionMode>({{PartitionMode::SizeBased, "size_based"},
                                                                  {PartitionMode::SparseNn, "sparse_nn"},
                                                                  {PartitionMode::CostAware, "cost_aware"},
                                                                  {PartitionMode::KlBased, "kl_based"},
                                                                  {PartitionMode::Optimal, "optimal"},
                                                                  {PartitionMode::AotBased, "aot_based"}});
inline constexpr auto kObjectives =
    enumTable<Objective>({{Objective::CriticalPath, "critical_path"}, {Objective::Bottleneck, "bottleneck"}});

// cost_aware, kl_based and optimal weigh node latencies.
bool needsLatencies(PartitionMode mode);

struct PartitionOptions {
  PartitionMode mode = PartitionMode::SizeBased;
  Objective objective = Objective::CriticalPath; // optimal
  bool saturateHost = false;                     // replicas on idle devices (torch's saturate_host)
  // Node latencies: required by the cost modes; when given (and timeResult), the result is timed.
  std::optional<IdVector<ir::NodeId, NodeLatency>> latencies;
  bool timeResult = true;
  double transferRateBytesPerSec = 0.0; // 0: the devices file's rate, else 1 byte/s (torch's default)
  std::string aotMapping, aotSource;    // aot_based: the mapping's JSON text and where it came from
};

struct DeviceUsage {
  std::int64_t logicalId = 0;
  std::string name;
  std::int64_t availableMemBytes = 0, usedMemBytes = 0;
  std::vector<std::uint32_t> partitions; // placed on it (replicas included), in plan order
  std::string backend;                   // the devices file's, or empty
};

struct PartitionTiming {
  std::vector<PartitionLatency> perPartition;
  CriticalPath criticalPath;
  double transferRateBytesPerSec = 0.0;
};

struct PartitionReport {
  PartitionMode mode = PartitionMode::SizeBased;
  Objective objective = Objective::CriticalPath;
  PartitionResult result;
  std::vector<plan::Boundary> boundaries; // per partition
  std::vector<DeviceUsage> devices;       // in the devices file's order
  std::optional<PartitionTiming> timing;  // with latencies
};

// Fails: InvalidArgument (a cost mode without latencies, aot_based without a mapping, and each
// mode's own errors), DoesNotFit (the model does not fit the devices).
[[nodiscard]] Expected<PartitionReport> partitionGraph(const ir::Graph& graph, const DeviceSet& devices,
                                                       const PartitionOptions& options);

} // namespace cleave::partition
