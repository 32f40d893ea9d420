// partition/latency.h - latency of partitions and of the partitioned graph, with the definitions
// of torch's partitioner_utils, computed in linear time.
//
//   node latency        (mem_latency_sec, computer_latency_sec); a node costs max(the two)
//   partition latency   the longest path through the partition's own callable nodes
//                       (get_latency_of_one_partition), with the mem and compute sums along it
//   communication       0 when parent and child sit on the same (non-empty) device list, else the
//                       output bytes of the parent's members (its callable nodes and the graph
//                       inputs and constants they read, as torch counts them) that the child's
//                       nodes read, once each, divided by the transfer rate
//   critical path       the longest path over the partition graph, partition latencies plus
//                       communication on its edges (get_latency_of_partitioned_graph)
// torch enumerates every path (exponential on graphs with many joins); here each is a longest
// path by dynamic programming over a topological order: O(V + E) for all partitions, and
// O(V + E + P log P) for the critical path.
#pragma once

#include <vector>

#include "base/expected.h"
#include "ir/graph.h"
#include "partition/devices.h"
#include "partition/memory_model.h"
#include "plan/plan.h"

namespace cleave::partition {

struct NodeLatency {
  double memSec = 0.0;
  double computeSec = 0.0;
};

struct PartitionLatency {
  double memSec = 0.0, computeSec = 0.0, overallSec = 0.0;
};

// {"node name": {"mem_latency_sec": m, "computer_latency_sec": c}, ...}. Every callable node
// needs an entry; unknown names are an error.
Expected<IdVector<ir::NodeId, NodeLatency>> parseLatencies(const ir::Graph& graph, std::string_view text,
                                                           const std::string& sourceName);

// Estimated from work: compute = FLOPs / flopsPerSec, memory = bytes read and written /
// bytesPerSec. FLOPs: MatMul/Gemm 2*M*N*K, Conv 2*outputs*Cin/groups*kernel, others one per
// output element.
IdVector<ir::NodeId, NodeLatency> estimateLatencies(const ir::Graph& graph, double flopsPerSec, double bytesPerSec);
// The FLOPs of one node by the rule above.
double estimateFlops(const ir::Graph& graph, ir::NodeId node);

std::vector<PartitionLatency> partitionLatencies(const ir::Graph& graph, const plan::CutPlan& plan,
                                                 const IdVector<ir::NodeId, NodeLatency>& latencies);

struct CriticalPath {
  double latencySec = 0.0;
  std::vector<std::uint32_t> partitions; // the path, in order
};

// `deviceIds[p]` are partition p's logical devices; a transfer runs at the rate between the
// first devices of the two partitions (the uniform rate when either has none). Fails:
// InvalidGraph if the partition graph has a cycle; InvalidArgument for a rate <= 0.
Expected<CriticalPath> criticalPath(const ir::Graph& graph, const plan::CutPlan& plan,
                                    const std::vector<std::vector<std::int64_t>>& deviceIds,
                                    const std::vector<PartitionLatency>& latencies,
                                    const IdVector<ir::NodeId, NodeSize>& sizes, const TransferRates& rates);

} // namespace cleave::partition
