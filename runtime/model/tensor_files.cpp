#include "runtime/model/tensor_files.h"

#include <onnx/onnx_pb.h>
#include <onnx/onnx-data.pb.h> // after onnx_pb.h, which defines ONNX_API

#include <algorithm>
#include <filesystem>

#include "base/file_io.h"
#include "io/npy.h"
#include "io/zip.h"

namespace cleave::runtime {

namespace fs = std::filesystem;

namespace {
constexpr std::size_t kMaxMemberBytes = std::size_t(1) << 34; // 16 GiB: more than an input can be

bool endsWith(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The name an unnamed tensor at `position` binds to.
Expected<std::string> positionalName(const std::vector<std::string>& names, std::size_t position,
                                     const std::string& what) {
  if (position >= names.size())
    return Error(ErrorCode::InvalidArgument) << what << ": tensor " << position << " has no name and the model has "
                                             << names.size() << " input(s)";
  return names[position];
}

Expected<at::Tensor> tensorFromNpy(std::string_view bytes, const std::string& what) {
  CLEAVE_TRY(io::NpyArray array, io::parseNpy(bytes, what));
  Expected<at::ScalarType> type = scalarTypeOf(array.dtype);
  if (!type)
    return Error(ErrorCode::Unsupported) << what << ": dtype " << ir::dtypeName(array.dtype)
                                         << " has no ATen type here";
  if (!array.fortranOrder)
    return tensorFromStored(array.data.data(), array.data.size(), array.dims, array.dtype);
  std::vector<std::int64_t> reversed(array.dims.rbegin(), array.dims.rend()), order;
  for (std::int64_t d = static_cast<std::int64_t>(reversed.size()); d-- > 0;)
    order.push_back(d);
  CLEAVE_TRY(at::Tensor tensor, tensorFromStored(array.data.data(), array.data.size(), reversed, array.dtype));
  return tensor.permute(order).contiguous();
}

// "arr_3" -> 3 (np.savez's positional names); nullopt otherwise.
std::optional<std::size_t> positionalKey(const std::string& key) {
  if (key.rfind("arr_", 0) != 0 || key.size() == 4 || key.size() > 12)
    return std::nullopt;
  std::size_t n = 0;
  for (char ch : key.substr(4)) {
    if (ch < '0' || ch > '9')
      return std::nullopt;
    n = n * 10 + static_cast<std::size_t>(ch - '0');
  }
  return n;
}

Status addTensor(TensorMap& tensors, std::string name, at::Tensor tensor, const std::string& what) {
  if (!tensors.emplace(std::move(name), std::move(tensor)).second)
    return Error(ErrorCode::InvalidArgument) << what << ": two tensors for one input";
  return {};
}

Expected<TensorMap> readNpz(const std::string& path, const std::vector<std::string>& names) {
  CLEAVE_TRY(std::string archive, readFile(path));
  CLEAVE_TRY(std::vector<io::ZipMember> members, io::readZip(archive, path, kMaxMemberBytes));
  TensorMap tensors;
  for (const io::ZipMember& member : members) {
    std::string what = path + ": '" + member.name + "'";
    if (!endsWith(member.name, ".npy"))
      return Error(ErrorCode::ParseError) << what << " is not a .npy member";
    std::string key = member.name.substr(0, member.name.size() - 4);
    CLEAVE_TRY(at::Tensor tensor, tensorFromNpy(member.data, what));
    std::optional<std::size_t> position = positionalKey(key);
    if (position && std::find(names.begin(), names.end(), key) == names.end()) {
      CLEAVE_TRY(key, positionalName(names, *position, what));
    }
    CLEAVE_CHECK(addTensor(tensors, key, std::move(tensor), what));
  }
  return tensors;
}

// A .pb file holding the value of graph input `position`: a TensorProto (named or not), or the
// container proto `kinds` names for that input (bound by position).
Expected<std::pair<std::string, at::Tensor>> readPb(const std::string& path, const std::vector<std::string>& names,
                                                    std::size_t position, const ProtoKinds& kinds) {
  CLEAVE_TRY(std::string bytes, readFile(path));
  auto kind = position < names.size() ? kinds.find(names[position]) : kinds.end();
  std::string name;
  if (kind != kinds.end() && kind->second != ProtoKind::Tensor) {
    CLEAVE_TRY(at::Tensor value, valueFromProto(bytes, path, kind->second));
    return std::make_pair(names[position], value);
  }
  CLEAVE_TRY(at::Tensor tensor, tensorFromProto(bytes, path, &name));
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    CLEAVE_TRY(name, positionalName(names, position, path));
  }
  return std::make_pair(name, tensor);
}

// input_N.pb and NAME.npy regular files of `folder` (links are not followed: an input never comes
// from outside the folder given).
Expected<TensorMap> readFolder(const std::string& folder, const std::vector<std::string>& names,
                               const ProtoKinds& kinds) {
  std::vector<fs::path> files;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, error))
    if (entry.symlink_status().type() == fs::file_type::regular)
      files.push_back(entry.path());
  if (error)
    return Error(ErrorCode::NotFound) << folder << ": " << error.message();
  std::sort(files.begin(), files.end());
  TensorMap tensors;
  for (const fs::path& file : files) {
    std::string base = file.filename().string(), what = file.string();
    if (base.rfind("input_", 0) == 0 && endsWith(base, ".pb")) {
      std::string digits = base.substr(6, base.size() - 9);
      if (digits.empty() || digits.size() > 6 || !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
        return Error(ErrorCode::InvalidArgument) << what << ": expected input_<N>.pb";
      CLEAVE_TRY(auto named, readPb(what, names, std::stoul(digits), kinds));
      CLEAVE_CHECK(addTensor(tensors, named.first, named.second, what));
    } else if (endsWith(base, ".npy")) {
      CLEAVE_TRY(std::string bytes, readFile(what));
      CLEAVE_TRY(at::Tensor tensor, tensorFromNpy(bytes, what));
      CLEAVE_CHECK(addTensor(tensors, base.substr(0, base.size() - 4), tensor, what));
    }
  }
  if (tensors.empty())
    return Error(ErrorCode::InvalidArgument) << folder << ": no input_<N>.pb or NAME.npy files";
  return tensors;
}

Expected<std::string> npyBytes(const at::Tensor& original, const std::string& name) {
  CLEAVE_CHECK(requirePlainTensor(original, name));
  if (isStringTensor(original))
    return Error(ErrorCode::Unsupported) << "tensor '" << name << "' holds strings: save it as .json or .pb";
  at::Tensor tensor = original.to(at::kCPU).contiguous();
  Expected<std::string> header = io::formatNpyHeader(dtypeOf(tensor.scalar_type()), tensor.sizes().vec());
  if (!header)
    return Error(ErrorCode::Unsupported) << "tensor '" << name << "': " << header.error().message();
  return *header + std::string(static_cast<const char*>(tensor.data_ptr()), tensor.nbytes());
}

Expected<std::string> pbBytes(const at::Tensor& original, const std::string& name);

// A sequence as an ONNX SequenceProto of its elements; an empty optional as an empty OptionalProto.
Expected<std::string> containerPbBytes(const at::Tensor& value, const std::string& name) {
  if (!value.defined()) {
    onnx::OptionalProto proto;
    proto.set_name(name);
    proto.set_elem_type(onnx::OptionalProto::UNDEFINED);
    return proto.SerializeAsString();
  }
  onnx::SequenceProto proto;
  proto.set_name(name);
  proto.set_elem_type(onnx::SequenceProto::TENSOR);
  for (const at::Tensor& element : value.unbind(0)) {
    CLEAVE_TRY(std::string bytes, pbBytes(element, name));
    if (!proto.add_tensor_values()->ParseFromString(bytes))
      return Error(ErrorCode::IoError) << "'" << name << "': a sequence element did not serialize";
  }
  return proto.SerializeAsString();
}

Expected<std::string> pbBytes(const at::Tensor& original, const std::string& name) {
  if (!original.defined() || original.is_nested())
    return containerPbBytes(original, name);
  if (isStringTensor(original)) {
    onnx::TensorProto proto;
    proto.set_name(name);
    proto.set_data_type(onnx::TensorProto::STRING);
    for (std::int64_t d : original.sizes())
      proto.add_dims(d);
    for (std::string& value : stringValues(original))
      proto.add_string_data(std::move(value));
    return proto.SerializeAsString();
  }
  at::Tensor tensor = original.to(at::kCPU).contiguous();
  ir::DType dtype = dtypeOf(tensor.scalar_type());
  if (dtype == ir::DType::Undefined)
    return Error(ErrorCode::Unsupported) << "tensor '" << name << "' has dtype " << tensor.scalar_type()
                                         << ", which .pb files here do not hold";
  onnx::TensorProto proto;
  proto.set_name(name);
  proto.set_data_type(static_cast<int>(dtype)); // ir::DType codes are ONNX's
  for (std::int64_t d : tensor.sizes())
    proto.add_dims(d);
  proto.set_raw_data(std::string(static_cast<const char*>(tensor.data_ptr()), tensor.nbytes()));
  return proto.SerializeAsString();
}

Status writeFolder(const TensorMap& tensors, const std::string& folder, const std::vector<std::string>& order) {
  std::error_code error;
  fs::create_directories(folder, error);
  if (error)
    return Error(ErrorCode::InvalidArgument) << folder << ": cannot create the folder: " << error.message();
  std::vector<std::string> names = order;
  for (const auto& entry : tensors) // tensors not in `order` follow it, by name
    if (std::find(order.begin(), order.end(), entry.first) == order.end())
      names.push_back(entry.first);
  for (std::size_t k = 0; k < names.size(); ++k) {
    auto found = tensors.find(names[k]);
    if (found == tensors.end())
      continue;
    CLEAVE_TRY(std::string bytes, pbBytes(found->second, names[k]));
    CLEAVE_CHECK(writeFileAtomically((fs::path(folder) / ("output_" + std::to_string(k) + ".pb")).string(), bytes));
  }
  return {};
}
} // namespace

Expected<TensorMap> readTensors(const std::string& path, const std::vector<std::string>& names,
                                const ProtoKinds& kinds) {
  std::error_code error;
  if (fs::is_directory(path, error))
    return readFolder(path, names, kinds);
  if (endsWith(path, ".npz"))
    return readNpz(path, names);
  if (endsWith(path, ".npy")) {
    CLEAVE_TRY(std::string bytes, readFile(path));
    CLEAVE_TRY(at::Tensor tensor, tensorFromNpy(bytes, path));
    CLEAVE_TRY(std::string name, positionalName(names, 0, path));
    return TensorMap{{name, tensor}};
  }
  if (endsWith(path, ".pb")) {
    CLEAVE_TRY(auto named, readPb(path, names, 0, kinds));
    return TensorMap{{named.first, named.second}};
  }
  return readTensorFile(path);
}

ProtoKinds containerValues(const ir::Graph& graph) {
  ProtoKinds kinds;
  auto note = [&](ir::ValueId value) {
    ir::ValueType type = graph.valueType(value);
    if (type.kind != ir::ValueKind::Sequence)
      return;
    kinds[std::string(graph.valueName(value))] = type.typeName == "optional" ? ProtoKind::Optional : ProtoKind::Sequence;
  };
  for (ir::NodeId input : graph.inputNodes())
    note(graph.outputs(input)[0]);
  for (ir::ValueId output : graph.graphOutputs())
    note(output);
  return kinds;
}

Status writeTensors(const TensorMap& tensors, const std::string& path, const std::vector<std::string>& order) {
  std::error_code error;
  if (endsWith(path, "/") || fs::is_directory(path, error))
    return writeFolder(tensors, path, order);
  if (endsWith(path, ".npz")) {
    std::vector<io::ZipMember> members;
    for (const auto& [name, tensor] : tensors) {
      CLEAVE_TRY(std::string bytes, npyBytes(tensor, name));
      members.push_back({name + ".npy", std::move(bytes)});
    }
    CLEAVE_TRY(std::string archive, io::writeZip(members));
    return writeFileAtomically(path, archive);
  }
  if (endsWith(path, ".npy") || endsWith(path, ".pb")) {
    if (tensors.size() != 1)
      return Error(ErrorCode::InvalidArgument) << path << ": a .npy or .pb file holds one tensor, there are "
                                               << tensors.size() << " (use .npz, .json or a folder)";
    const auto& [name, tensor] = *tensors.begin();
    CLEAVE_TRY(std::string bytes, endsWith(path, ".npy") ? npyBytes(tensor, name) : pbBytes(tensor, name));
    return writeFileAtomically(path, bytes);
  }
  return writeTensorFile(tensors, path);
}

} // namespace cleave::runtime
