// partition/sparse_nn.h - torch's sparse_nn partitioning for recommendation models.
//
// Embedding nodes (FX: the exporter's `embedding` flag, torch's is_embedding_node test; ONNX: a
// Gather, or a Loop as EmbeddingBag exports, reading a rank-2 initializer) and the rest are cut
// into separate partitions in node order, each filled up to the (uniform) device memory; then, per
// kind, the smallest partition merges with the largest partition within one BFS level that has
// room, until the smallest finds none (Partitioner.sparse_nn_partition). Embedding partitions get
// one device each; every non-embedding partition is replicated on all of those devices, so each
// embedding partition plus all non-embedding ones must fit a device.
// Partitions are listed in an order that runs forward (ties: torch's list order).
// Fails: InvalidArgument (devices of different sizes), DoesNotFit (a node larger than a device;
// more embedding partitions than devices; an embedding partition that cannot share a device with
// the rest), InvalidGraph (merged partitions that depend on each other in a cycle).
// Complexity: O(P x (V + E)) for the merges; P partitions is small for these models.
#pragma once

#include "partition/size_based.h"

namespace cleave::partition {

bool isEmbeddingNode(const ir::Graph& graph, ir::NodeId node);

[[nodiscard]] Expected<PartitionResult> partitionSparseNn(const ir::Graph& graph, const DeviceSet& devices);

} // namespace cleave::partition
