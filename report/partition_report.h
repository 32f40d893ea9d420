// report/partition_report.h - what `cleave partition` prints and writes: partitions with their
// nodes, devices, bytes, boundary values and (when timed) latencies; memory per device; the
// critical path. Text for people, JSON for tools (report.json; plan.json keeps "partitions"),
// and the rows of memory.svg. Deterministic; O(V + partitions x devices).
#pragma once

#include <string>
#include <vector>

#include "base/json.h"
#include "partition/partition.h"
#include "report/memory_svg.h"

namespace cleave::report {

Json partitionReportJson(const ir::Graph& graph, const partition::PartitionReport& report);
// plan.json's "device_backends": logical device id (as a string) -> the backend its devices-file entry
// names; empty when no device names one.
Json deviceBackendsJson(const partition::PartitionReport& report);
std::string partitionReportText(const partition::PartitionReport& report);
std::vector<DeviceMemoryRow> partitionMemoryRows(const partition::PartitionReport& report);

} // namespace cleave::report
