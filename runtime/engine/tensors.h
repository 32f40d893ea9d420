// runtime/engine/tensors.h - ATen tensors for cleave's IR: dtypes, parameters, ONNX TensorProto bytes,
// named tensor maps and their JSON file format, random inputs, summaries.
//
// Tensor files (JSON; the format tests/oracle/onnxruntime_oracle.py reads too):
//   {"name": {"dtype": "float32", "dims": [1, 3], "data": [0.5, 1.0, 2.0]}, ...}
// dtypes: float32, float64, float16, int64, int32, int16, int8, uint8, bool, string (data: JSON
// strings). Data is row-major.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <optional>
#include <string>

#include "base/expected.h"
#include "ir/graph.h"
#include "runtime/engine/optimizations.h"

namespace cleave::runtime {

// Values by name; ordered so printing and files are deterministic.
using TensorMap = std::map<std::string, at::Tensor>;

// ATen 1.13 has no unsigned 16/32/64-bit dtypes, so those values are held widened: u16 in int32,
// u32 in int64 (exact), and u64 as its 64 bits in int64 (exact for values below 2^63; BitShift
// treats them as unsigned). They come back as int32/int64 in saved outputs.
Expected<at::ScalarType> scalarTypeOf(ir::DType dtype);
ir::DType dtypeOf(at::ScalarType type);
// The half type autocast casts products to under `precision` (optimizations.h); none for Fp32.
std::optional<at::ScalarType> autocastTypeOf(Precision precision);
// A value's dtype: String for string tensors, else dtypeOf(its scalar type).
ir::DType dtypeOf(const at::Tensor& tensor);

// ONNX string tensors. ATen has no string dtype, so a string tensor is a CPU tensor whose storage
// holds std::string elements (c10's TypeMeta for std::string constructs and destroys them with
// the storage): the strings live in the value itself, with its shape, and no table on the side.
// Only the kernels that take strings (Cast, CastLike, StringNormalizer, Identity, ...) read them;
// any other ATen op on one throws ("Unsupported TypeMeta"), which the executor reports naming the
// node. `scalar_type()` throws on them too: test isStringTensor first.
bool isStringTensor(const at::Tensor& tensor);
// `values` in row-major order; their count must be the product of `dims`.
at::Tensor makeStringTensor(const std::vector<std::int64_t>& dims, std::vector<std::string> values);
// The elements in row-major order (views with any strides included).
std::vector<std::string> stringValues(const at::Tensor& tensor);

// A parameter's bytes as a tensor (copied out of the model file once; owns its memory).
// `asRows`: a 2-D float32 [K, N] parameter is stored as [N, K] rows, the tensor a transposed view
// of them (what oneDNN's products read in place); other parameters ignore it. `ownMapping`: a
// float32 parameter's memory is a mapping of its own, unmapped when the tensor is freed
// (emptyInOwnMapping: a weight let go after its first run).
Expected<at::Tensor> loadParameter(const ir::Graph& graph, ir::ParamId param, bool asRows = false,
                                   bool ownMapping = false);
// A serialized onnx.TensorProto (Constant's `value`, ConstantOfShape's `value`, a .pb file) as a
// tensor; `name` (when given) receives the proto's name. Dims are checked before allocating.
Expected<at::Tensor> tensorFromProto(std::string_view bytes, const std::string& what, std::string* name = nullptr);
// What a .pb file holds: an ONNX TensorProto, a SequenceProto of tensors (read as a sequence,
// runtime/engine/kernel.h) or an OptionalProto (its value, or an undefined tensor when empty).
enum class ProtoKind : std::uint8_t { Tensor, Sequence, Optional };
using ProtoKinds = std::map<std::string, ProtoKind>; // by value name
Expected<at::Tensor> valueFromProto(std::string_view bytes, const std::string& what, ProtoKind kind);
// A tensor of `dims` and `type` holding a copy of `bytes` (their count must match).
at::Tensor tensorFromBytes(const void* data, std::size_t bytes, std::vector<std::int64_t> dims, at::ScalarType type);
// The same from values stored as `dtype` (a model's or a file's bytes), widening unsigned 16/32-bit
// values as scalarTypeOf says; the byte count must match the dims.
Expected<at::Tensor> tensorFromStored(const void* data, std::size_t bytes, std::vector<std::int64_t> dims,
                                      ir::DType dtype);

Expected<TensorMap> readTensorFile(const std::string& path);
Status writeTensorFile(const TensorMap& tensors, const std::string& path);
// The text writeTensorFile writes (one JSON object and a newline).
Expected<std::string> formatTensorFile(const TensorMap& tensors);

// Random inputs for every graph input: floats ~ N(0, 1), integers in [0, intHigh), bools
// 50/50; each input from a generator seeded by `seed` and its name, so a model and its cut get
// the same tensors for the same inputs. Unknown dims take `dimOverrides[symbol name]`, else 1.
Expected<TensorMap> randomInputs(const ir::Graph& graph, std::uint64_t seed, std::int64_t intHigh = 10,
                                 const std::map<std::string, std::int64_t>& dimOverrides = {});

Expected<at::Tensor> randomTensor(const ir::Graph& graph, ir::ValueId value, std::uint64_t seed, std::int64_t intHigh,
                                  const std::map<std::string, std::int64_t>& dimOverrides = {});

// Fails (Unsupported, naming `name`) when `value` is a sequence or an empty optional: formats that
// hold only tensors (.json, .npy, .npz) refuse them.
Status requirePlainTensor(const at::Tensor& value, const std::string& name);

// "f32[1,1000] mean 0.0123 std 0.98 min -3.1 max 2.9"
std::string summarize(const at::Tensor& tensor);

} // namespace cleave::runtime
