#include "io/npy.h"

#include <cstring>
#include <limits>

namespace cleave::io {

namespace {
constexpr std::string_view kMagic = "\x93NUMPY";

struct DescrName {
  char kind; // 'b' bool, 'i' signed, 'u' unsigned, 'f' float
  int size;
  ir::DType dtype;
};
constexpr DescrName kDescrs[] = {
    {'b', 1, ir::DType::Bool}, {'i', 1, ir::DType::I8},  {'i', 2, ir::DType::I16}, {'i', 4, ir::DType::I32},
    {'i', 8, ir::DType::I64},  {'u', 1, ir::DType::U8},  {'u', 2, ir::DType::U16}, {'u', 4, ir::DType::U32},
    {'u', 8, ir::DType::U64},  {'f', 2, ir::DType::F16}, {'f', 4, ir::DType::F32}, {'f', 8, ir::DType::F64}};

// The text after `'key':` in the header dict, spaces skipped; npos when the key is absent.
std::size_t valueOf(std::string_view header, std::string_view key) {
  std::string quoted = "'" + std::string(key) + "'";
  std::size_t at = header.find(quoted);
  if (at == std::string_view::npos)
    return at;
  at = header.find(':', at + quoted.size());
  if (at == std::string_view::npos)
    return at;
  at = header.find_first_not_of(' ', at + 1);
  return at;
}

Expected<ir::DType> parseDescr(std::string_view header, const std::string& what) {
  std::size_t at = valueOf(header, "descr");
  if (at == std::string_view::npos || header[at] != '\'')
    return Error(ErrorCode::ParseError) << what << ": the .npy header has no descr";
  std::size_t end = header.find('\'', at + 1);
  if (end == std::string_view::npos)
    return Error(ErrorCode::ParseError) << what << ": the .npy header's descr is not closed";
  std::string_view descr = header.substr(at + 1, end - at - 1);
  if (descr.size() < 3 || (descr[0] != '<' && descr[0] != '|' && descr[0] != '='))
    return Error(ErrorCode::Unsupported) << what << ": .npy dtype '" << descr
                                         << "' (little-endian bool, int, uint or float only)";
  int size = 0;
  for (char ch : descr.substr(2)) {
    if (ch < '0' || ch > '9' || size > 64)
      return Error(ErrorCode::Unsupported) << what << ": .npy dtype '" << descr << "'";
    size = size * 10 + (ch - '0');
  }
  for (const DescrName& d : kDescrs)
    if (d.kind == descr[1] && d.size == size)
      return d.dtype;
  return Error(ErrorCode::Unsupported) << what << ": .npy dtype '" << descr
                                       << "' (bool, int8-64, uint8-64, float16/32/64 only)";
}

Expected<std::vector<std::int64_t>> parseShape(std::string_view header, const std::string& what) {
  std::size_t at = valueOf(header, "shape");
  if (at == std::string_view::npos || header[at] != '(')
    return Error(ErrorCode::ParseError) << what << ": the .npy header has no shape";
  std::size_t end = header.find(')', at);
  if (end == std::string_view::npos)
    return Error(ErrorCode::ParseError) << what << ": the .npy header's shape is not closed";
  std::vector<std::int64_t> dims;
  std::int64_t elements = 1;
  std::size_t i = at + 1;
  while (i < end) {
    while (i < end && (header[i] == ' ' || header[i] == ','))
      ++i;
    if (i == end)
      break;
    std::int64_t dim = 0;
    std::size_t digits = 0;
    for (; i < end && header[i] >= '0' && header[i] <= '9'; ++i, ++digits) {
      if (dim > (std::numeric_limits<std::int64_t>::max() - 9) / 10)
        return Error(ErrorCode::ParseError) << what << ": a .npy dimension is too large";
      dim = dim * 10 + (header[i] - '0');
    }
    if (digits == 0)
      return Error(ErrorCode::ParseError) << what << ": the .npy shape is not a tuple of integers";
    if (dim > 0 && elements > std::numeric_limits<std::int64_t>::max() / 16 / dim)
      return Error(ErrorCode::ParseError) << what << ": the .npy shape has too many elements";
    elements *= dim;
    dims.push_back(dim);
  }
  return dims;
}
} // namespace

Expected<NpyArray> parseNpy(std::string_view bytes, const std::string& what) {
  if (bytes.size() < 10 || bytes.substr(0, kMagic.size()) != kMagic)
    return Error(ErrorCode::ParseError) << what << ": not a .npy file (no \\x93NUMPY magic)";
  auto major = static_cast<unsigned char>(bytes[6]);
  if (major < 1 || major > 3)
    return Error(ErrorCode::Unsupported) << what << ": .npy version " << int(major) << " (1, 2 and 3 are read)";
  std::size_t lengthBytes = major == 1 ? 2 : 4, headerLength = 0;
  if (bytes.size() < 8 + lengthBytes)
    return Error(ErrorCode::ParseError) << what << ": the .npy file ends in its header";
  for (std::size_t k = 0; k < lengthBytes; ++k)
    headerLength |= static_cast<std::size_t>(static_cast<unsigned char>(bytes[8 + k])) << (8 * k);
  std::size_t dataStart = 8 + lengthBytes + headerLength;
  if (headerLength > bytes.size() || dataStart > bytes.size())
    return Error(ErrorCode::ParseError) << what << ": the .npy file ends in its header";
  std::string_view header = bytes.substr(8 + lengthBytes, headerLength);
  NpyArray array;
  CLEAVE_TRY(array.dtype, parseDescr(header, what));
  CLEAVE_TRY(array.dims, parseShape(header, what));
  std::size_t order = valueOf(header, "fortran_order");
  if (order == std::string_view::npos)
    return Error(ErrorCode::ParseError) << what << ": the .npy header has no fortran_order";
  array.fortranOrder = header.substr(order, 4) == "True";
  std::int64_t elements = 1;
  for (std::int64_t d : array.dims)
    elements *= d;
  std::size_t need = static_cast<std::size_t>(elements) * static_cast<std::size_t>(ir::dtypeSize(array.dtype));
  if (bytes.size() - dataStart != need)
    return Error(ErrorCode::ParseError) << what << ": .npy data has " << bytes.size() - dataStart
                                        << " bytes, its shape needs " << need;
  array.data = bytes.substr(dataStart);
  return array;
}

Expected<std::string> formatNpyHeader(ir::DType dtype, const std::vector<std::int64_t>& dims) {
  const DescrName* descr = nullptr;
  for (const DescrName& d : kDescrs)
    if (d.dtype == dtype)
      descr = &d;
  if (!descr)
    return Error(ErrorCode::Unsupported) << "dtype " << ir::dtypeName(dtype) << " has no .npy form here";
  std::string shape = "(";
  for (std::size_t i = 0; i < dims.size(); ++i)
    shape += (i > 0 ? ", " : "") + std::to_string(dims[i]);
  shape += dims.size() == 1 ? ",)" : ")"; // (), (5,), (2, 3)
  std::string dict = std::string("{'descr': '") + (descr->size == 1 ? '|' : '<') + descr->kind +
                     std::to_string(descr->size) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  std::size_t unpadded = kMagic.size() + 4 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::string out(kMagic);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(dict.size() & 0xff));
  out.push_back(static_cast<char>(dict.size() >> 8));
  return out + dict;
}

} // namespace cleave::io
