// io/pt2.h - a torch.export program (`torch.export.save`'s .pt2 archive) into cleave's IR, read in
// C++ without Python: the archive's models/<name>.json (the ExportedProgram in torch's serde
// schema), never the weights themselves: their sizes and kinds are in the program.
//
// Versions read: archive_format "pt2", archive_version 0, and ExportedProgram schema 8.x (torch
// 2.11 writes 8.17; a minor version only adds optional fields). Any other version is refused in
// one line naming it.
//
// Mapping, as FX-graph JSON maps (io/fx.h), so that inspect, support, split, partition and
// pipeline treat both alike:
//   - each graph input by the program's signature: a user input is an Input; a parameter a
//     Parameter that trains, a buffer a Parameter fixed as a Buffer, a lifted tensor constant one
//     fixed as a Constant, each named by its fully qualified name and sized by its tensor meta;
//   - each node an Op whose type is its target ("torch.ops.aten.linear.default", as torch's
//     get_node_target names it), whose operands are the tensors and symbolic ints its arguments
//     name (unique, in argument order), with its other arguments kept as FX JSON's "args" and
//     "kwargs" attributes; its outputs are its values (a node with none, such as
//     torch.distributed.pipelining's pipe_split, gets one of kind None under its name);
//   - its scope the innermost module of its nn_module_stack;
//   - the graph's outputs the signature's user outputs and loss output.
// Fails: NotFound, ParseError (not a zip, no archive_format, malformed JSON or fields, a dangling
// name), Unsupported (another version, a ZIP64 archive, a custom object or token input).
// Complexity: O(archive's JSON) to parse, O(V + E) to build; the weights are mapped, not read.
#pragma once

#include <string>
#include <string_view>

#include "base/expected.h"
#include "ir/graph.h"

namespace cleave::io {

inline constexpr int kPt2SchemaMajor = 8;

[[nodiscard]] Expected<ir::Graph> readExportedProgram(const std::string& path);
// The same from the archive's bytes; `sourceName` names it in errors.
[[nodiscard]] Expected<ir::Graph> parseExportedProgram(std::string_view archive, const std::string& sourceName);
// The program alone: the text of the archive's models/<name>.json (its fuzz target reaches the
// program's fields here, past the archive's CRC checks).
[[nodiscard]] Expected<ir::Graph> parseExportedProgramJson(std::string_view text, const std::string& sourceName);

} // namespace cleave::io
