#include "io/tensor_file.h"

#include "base/checked_math.h"
#include "base/json.h"

namespace cleave::io {

namespace {
constexpr std::pair<std::string_view, ir::DType> kDtypeNames[] = {
    {"float32", ir::DType::F32}, {"float64", ir::DType::F64}, {"float16", ir::DType::F16},
    {"int64", ir::DType::I64},   {"int32", ir::DType::I32},   {"int16", ir::DType::I16},
    {"int8", ir::DType::I8},     {"uint8", ir::DType::U8},    {"bool", ir::DType::Bool},
    {"string", ir::DType::String},
};
} // namespace

std::optional<ir::DType> tensorFileDtype(std::string_view name) {
  for (const auto& [text, dtype] : kDtypeNames)
    if (text == name)
      return dtype;
  return std::nullopt;
}

std::string_view tensorFileDtypeName(ir::DType dtype) {
  for (const auto& [text, known] : kDtypeNames)
    if (known == dtype)
      return text;
  return "";
}

namespace {
using nlohmann::json;

Status readData(const json& data, TensorFileEntry& entry, const std::string& source) {
  auto fail = [&](const std::string& what) {
    return Error(ErrorCode::ParseError) << source << ": '" << entry.name << "': " << what;
  };
  if (entry.dtype == ir::DType::String) {
    for (const json& v : data) {
      if (!v.is_string())
        return fail("string data must be JSON strings");
      entry.strings.push_back(v.get<std::string>());
    }
    return {};
  }
  bool exact = entry.dtype == ir::DType::I64; // doubles lose int64 precision past 2^53
  (exact ? entry.ints.reserve(data.size()) : entry.values.reserve(data.size()));
  for (const json& v : data) {
    if (!v.is_number() && !v.is_boolean())
      return fail("data must be numbers");
    if (!exact) {
      entry.values.push_back(v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>());
    } else if (v.is_boolean() || v.is_number_integer()) {
      entry.ints.push_back(v.is_boolean() ? v.get<bool>() : v.get<std::int64_t>());
    } else {
      double d = v.get<double>();
      if (!(d >= -9.2e18 && d <= 9.2e18)) // out of int64's range
        return fail("int64 data holds " + toJsonText(v) + ", which is not an int64");
      entry.ints.push_back(static_cast<std::int64_t>(d));
    }
  }
  return {};
}

Expected<TensorFileEntry> readEntry(const std::string& name, const json& spec, const std::string& source) {
  auto fail = [&](const std::string& what) {
    return Error(ErrorCode::ParseError) << source << ": '" << name << "': " << what;
  };
  if (!spec.is_object() || !spec.contains("dtype") || !spec.contains("dims") || !spec.contains("data"))
    return fail("needs dtype, dims and data");
  TensorFileEntry entry;
  entry.name = name;
  std::optional<ir::DType> dtype = spec["dtype"].is_string() ? tensorFileDtype(spec["dtype"].get<std::string>())
                                                             : std::nullopt;
  if (!dtype)
    return fail("unknown dtype " + toJsonText(spec["dtype"]));
  entry.dtype = *dtype;
  if (!spec["dims"].is_array())
    return fail("dims must be an array of non-negative integers");
  for (const json& d : spec["dims"]) {
    CLEAVE_TRY(std::int64_t dim, jsonInteger(d, source, "'" + name + "'.dims", 0, INT64_MAX));
    entry.dims.push_back(dim);
  }
  std::optional<std::int64_t> count = checkedProduct(entry.dims);
  if (!count)
    return fail("dims overflow: the element count does not fit in 64 bits");
  const json& data = spec["data"];
  if (!data.is_array() || static_cast<std::int64_t>(data.size()) != *count)
    return fail("data has " + std::to_string(data.is_array() ? data.size() : 0) + " values, dims need " +
                std::to_string(*count));
  CLEAVE_CHECK(readData(data, entry, source));
  return entry;
}
} // namespace

Expected<std::vector<TensorFileEntry>> parseTensorFile(std::string_view text, const std::string& source) {
  CLEAVE_TRY(json doc, parseJsonInput(text, source));
  return guardJson(source, [&]() -> Expected<std::vector<TensorFileEntry>> {
    if (!doc.is_object())
      return Error(ErrorCode::ParseError) << source << ": expected a JSON object of tensors";
    std::vector<TensorFileEntry> entries;
    for (const auto& [name, spec] : doc.items()) {
      CLEAVE_TRY(TensorFileEntry entry, readEntry(name, spec, source));
      entries.push_back(std::move(entry));
    }
    return entries;
  });
}

} // namespace cleave::io
