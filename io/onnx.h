// io/onnx.h - ONNX models in and out of cleave's IR (libonnx + protobuf).
//
// Reading: opsets 11 and up; initializers become Parameter nodes (their bytes are kept in one
// inline blob, or left in the external data file and read on demand); onnx's own shape
// inference fills missing value types; unnamed nodes get "<op>_<k>"; subgraph attributes
// (If/Loop/Scan bodies) are kept as serialized protos and the outer values they read become
// the node's implicit operands, so dependencies stay right.
// Writing: the reverse; a written model passes onnx's full check and reads back to the same
// graph (same nodes, values, attributes and initializers).
// Complexity: reading is linear in the model's bytes outside the weights (weights stay mapped or
// external until used); writing is linear in the model.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/expected.h"
#include "io/onnx_functions.h"
#include "ir/graph.h"

namespace cleave::io {

enum class ShapeInference : std::uint8_t {
  Auto,   // run onnx shape inference unless every node output already has a type
  Always, // always run it
  Never,  // keep the types the file has
};

struct FixedPatterns {
  std::vector<std::string> frozen;    // a tensor matching one is frozen
  std::vector<std::string> trainable; // when given, a tensor matching none is frozen
};

struct OnnxReadOptions {
  ShapeInference shapeInference = ShapeInference::Auto;
  // Read the model as any batch would see it: dim 0 of the graph inputs that share the first
  // input's static dim 0 becomes a symbol, and every other type is inferred anew from it (onnx's
  // inference, as io/fixed_batch.h does). Value and node ids are those of a plain read, so a plan
  // computed on this graph applies to that one (simplify's folding of what holds for any batch).
  bool freeRows = false;
  // --frozen / --trainable: glob patterns (fnmatch) over initializer names that hold tensors fixed
  // as frozen (io/fixed_parameters.h).
  FixedPatterns fixedPatterns;
  // Ops to run as their function bodies (io/onnx_functions.h): the runtime's, those it has no
  // kernel for. Empty: every node stays whole, as planning needs.
  ExpandFunctionFilter expandFunctions;
};

inline constexpr std::int64_t kMinOnnxOpset = 11;
// How a refusal of a type ATen lacks ends (the reader's of sub-byte types), so that tools can tell
// such cases apart from failures (tests/onnx_backend/backend_suite.cpp counts them apart).
inline constexpr std::string_view kNoAtenType = "no ATen tensor type holds it, so cleave does not read it yet";
// Models of opsets 1 to 10 are brought to opset 11 on reading with libonnx's version converter
// (ModelInfo::convertedFromOpset says so); older ones are refused.
inline constexpr std::int64_t kMinConvertibleOpset = 1;
// The domain of ops cleave gives a node whose old form no newer ai.onnx op expresses: a batched
// Scan-8 (an opset 8 model's Scan, with per-batch sequence_lens) becomes cleave::Scan8 on
// conversion, which the runtime runs as Scan-8 says.
inline constexpr std::string_view kLegacyDomain = "cleave";
// The newest ai.onnx opset whose semantics cleave knows: the newest that its ONNX library (the onnx
// release scripts/onnx-library builds) defines, each op's changes up to it followed by the
// runtime's kernels or its function bodies (io_test checks the two agree). A newer model is
// refused rather than run with older semantics.
inline constexpr std::int64_t kMaxOnnxOpset = 28;

// Fails: NotFound (no such file), ParseError (not an ONNX protobuf, unknown dtype, bad external
// data reference), Unsupported (an opset cleave cannot convert or newer than kMaxOnnxOpset, an op the opset converter cannot
// convert, sparse initializers), InvalidArgument (negative
// dims, sizes that overflow 64 bits, external data outside the model's folder), InvalidGraph (dangling
// inputs, duplicate names, cycles).
[[nodiscard]] Expected<ir::Graph> readOnnx(const std::string& path, const OnnxReadOptions& options = {});
// The same from bytes in memory (tests, fuzzing); `name` stands in for the path, and external data
// resolves against the working directory's folder of `name`.
[[nodiscard]] Expected<ir::Graph> readOnnxBytes(std::string_view bytes, const std::string& name,
                                                const OnnxReadOptions& options = {});

// A subgraph attribute (a serialized GraphProto: a Loop or If body) as a graph of its own. Its
// inputs are the body's inputs followed by `outerValues` (the outer-scope values it reads, the
// node's implicit operands), untyped; `opsetImports` are the enclosing model's. No shape
// inference. Fails like readOnnx; `what` names the body in messages.
[[nodiscard]] Expected<ir::Graph> readOnnxSubgraph(std::string_view graphProtoBytes,
                                                   const std::vector<std::string>& outerValues,
                                                   const std::vector<std::pair<std::string, std::int64_t>>& opsetImports,
                                                   const std::string& what);

// A tensor attribute's value (the serialized TensorProto an ir::Attribute of kind Tensor holds):
// its dtype, dims and little-endian bytes. Fails: ParseError (not a TensorProto, an unknown
// dtype), Unsupported (external or string data).
struct TensorValue {
  ir::DType dtype = ir::DType::Undefined;
  std::vector<std::int64_t> dims;
  std::string bytes;
};
[[nodiscard]] Expected<TensorValue> decodeTensorAttribute(std::string_view proto, const std::string& what);

// onnx's shape inference run anew on `graph` as it now is (folding can make shapes computable that
// were not), without its large weights' bytes: each value's type as inference sees it, indexed by
// ValueId (ValueKind::Unknown where it says nothing). In a child process, as on reading.
// Fails: what inference refuses (a conflict between a declared and an inferred type).
[[nodiscard]] Expected<std::vector<ir::ValueType>> inferValueTypes(const ir::Graph& graph);

struct OnnxWriteOptions {
  // Parameters of at least this many bytes go to `<file>.data` beside the model (ONNX external
  // data); 0 keeps everything inline. Models over 2 GB must use external data.
  std::int64_t externalDataThreshold = 0;
};

// Writes atomically (temporary file, then rename). Fails: Unsupported for FX graphs (their ops
// are torch targets, not ONNX ops), IoError when the destination cannot be written.
[[nodiscard]] Status writeOnnx(const ir::Graph& graph, const std::string& path,
                               const OnnxWriteOptions& options = {});

// onnx's full check on a file: the checker, then strict shape inference with type checks
// (what Python's onnx.checker.check_model(m, full_check=True) does).
[[nodiscard]] Status checkOnnxFile(const std::string& path);

} // namespace cleave::io
