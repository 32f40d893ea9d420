// ir/printer.h - the readable text form of a graph, one node per line (the debug view).
//
//   graph "main" (onnx, opset ai.onnx:17)
//   %x : f32[4,16] = placeholder
//   %w0 : f32[16,16] = get_attr  # 1.0 KiB
//   %h : f32[4,16] = MatMul(%x, %w0)  # MatMul_0
//   output(%h)
//
// A node whose only output has the node's own name prints no "# name"; attributes print in
// braces, tensors and subgraphs as their byte length and a hash, so equal text means equal graphs.
// Complexity: linear in the graph, attribute and tensor bytes included (hashed once).
#pragma once

#include <ostream>
#include <string>

#include "ir/graph.h"

namespace cleave::ir {

void printGraph(const Graph& graph, std::ostream& out);
std::string printGraph(const Graph& graph);
std::string formatAttribute(const Attribute& attr);

} // namespace cleave::ir
