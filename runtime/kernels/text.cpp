// runtime/kernels/text.cpp - text ops: casts to and from string tensors (runtime/engine/tensors.h),
// StringNormalizer, StringConcat, StringSplit, RegexFullMatch, string Equal, ai.onnx.ml's LabelEncoder,
// Binarizer and ArrayFeatureExtractor, and TfIdfVectorizer over integer token ids (string pools are
// not supported).
// Complexity: casts and StringNormalizer O(total characters); TfIdfVectorizer O(rows * columns *
// skips * gram lengths * log pool) per run.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <locale>
#include <map>
#include <regex>
#include <set>
#include <span>

#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

// The attribute pool: each n-gram (n = 1.. by ngram_counts' sections) with its output column.
std::map<std::vector<std::int64_t>, std::int64_t> gramColumns(KernelContext& c) {
  std::vector<std::int64_t> pool = c.intsAttr("pool_int64s"), starts = c.intsAttr("ngram_counts"),
                            columns = c.intsAttr("ngram_indexes");
  if (pool.empty())
    throw KernelError("TfIdfVectorizer needs pool_int64s (string pools are not supported)");
  std::map<std::vector<std::int64_t>, std::int64_t> grams;
  std::size_t gram = 0;
  for (std::size_t section = 0; section < starts.size(); ++section) {
    const std::size_t n = section + 1;
    const std::size_t begin = static_cast<std::size_t>(starts[section]);
    const std::size_t end = section + 1 < starts.size() ? static_cast<std::size_t>(starts[section + 1]) : pool.size();
    if (begin > end || end > pool.size() || (end - begin) % n != 0)
      throw KernelError("ngram_counts does not divide pool_int64s into n-grams");
    for (std::size_t at = begin; at < end; at += n, ++gram) {
      if (gram >= columns.size())
        throw KernelError("ngram_indexes has fewer entries than the pool has n-grams");
      grams[std::vector<std::int64_t>(pool.begin() + static_cast<std::ptrdiff_t>(at),
                                      pool.begin() + static_cast<std::ptrdiff_t>(at + n))] = columns[gram];
    }
  }
  return grams;
}

// TF: how often each pool n-gram occurs in a row (n from min_gram_length to max_gram_length, its
// tokens up to max_skip_count apart; a 1-gram counts once per position); IDF: the weight where it
// occurs; TFIDF: count times weight.
Outputs tfIdfVectorizer(KernelContext& c) {
  const at::Tensor x = c.input(0);
  if (x.dim() < 1 || x.dim() > 2 || !at::isIntegralType(x.scalar_type(), false))
    throw KernelError("TfIdfVectorizer takes a 1-D or 2-D tensor of integer tokens");
  const std::map<std::vector<std::int64_t>, std::int64_t> grams = gramColumns(c);
  std::vector<std::int64_t> columns = c.intsAttr("ngram_indexes");
  const std::int64_t width = *std::max_element(columns.begin(), columns.end()) + 1;
  const std::int64_t minN = c.intAttr("min_gram_length", 1), maxN = c.intAttr("max_gram_length", 1),
                     maxSkip = c.intAttr("max_skip_count", 0);
  at::Tensor rows = x.reshape({x.dim() == 1 ? 1 : x.size(0), -1}).to(at::kLong).contiguous();
  const std::int64_t count = rows.size(0), length = rows.size(1);
  at::Tensor out = at::zeros({count, width}, at::TensorOptions().dtype(at::kFloat));
  const std::int64_t* tokens = rows.data_ptr<std::int64_t>();
  float* y = out.data_ptr<float>();
  std::vector<std::int64_t> gram;
  for (std::int64_t r = 0; r < count; ++r)
    for (std::int64_t start = 0; start < length; ++start)
      for (std::int64_t n = std::max<std::int64_t>(minN, 1); n <= maxN; ++n)
        for (std::int64_t skip = 0; skip <= (n == 1 ? 0 : maxSkip); ++skip) {
          if (start + (n - 1) * (skip + 1) >= length)
            break;
          gram.clear();
          for (std::int64_t k = 0; k < n; ++k)
            gram.push_back(tokens[r * length + start + k * (skip + 1)]);
          if (auto found = grams.find(gram); found != grams.end())
            y[r * width + found->second] += 1.0f;
        }
  const std::string mode = c.stringAttr("mode", "TF");
  std::vector<float> weights = c.floatsAttr("weights");
  if (mode != "TF") {
    at::Tensor weight = weights.empty() ? at::ones({width}) : at::zeros({width});
    for (std::size_t g = 0; g < weights.size() && g < columns.size(); ++g)
      weight[columns[g]] = weights[g];
    out = mode == "IDF" ? (out > 0).to(at::kFloat) * weight : out * weight;
  }
  return {x.dim() == 1 ? out.squeeze(0) : out};
}

// ---- Casts with strings ---------------------------------------------------------------------


// A float as numpy's str() writes it (ONNX's reference casts with numpy): the shortest digits that
// read back to the same value, positional for 1e-4 <= |v| < 1e16 ("0.5", "123456.0"), else
// scientific ("1e-05", "1.5e+16"); NaN and infinities as ONNX spells them ("NaN", "INF", "-INF").
std::string formatFloat(double value, bool single) {
  if (std::isnan(value))
    return "NaN";
  if (std::isinf(value))
    return value < 0 ? "-INF" : "INF";
  char buffer[64];
  auto written = single ? std::to_chars(buffer, buffer + sizeof buffer, static_cast<float>(value), std::chars_format::scientific)
                        : std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  std::string scientific(buffer, written.ptr); // "-d.ddde-XX"
  std::size_t e = scientific.find('e');
  int exponent = std::stoi(scientific.substr(e + 1));
  std::string sign = scientific[0] == '-' ? "-" : "", digits;
  for (char ch : scientific.substr(sign.size(), e - sign.size()))
    if (ch != '.')
      digits += ch;
  double magnitude = std::fabs(value);
  if (magnitude != 0 && (magnitude < 1e-4 || magnitude >= 1e16)) {
    std::string exp = std::to_string(std::abs(exponent));
    return sign + digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "") + "e" +
           (exponent < 0 ? "-" : "+") + (exp.size() < 2 ? "0" : "") + exp;
  }
  if (exponent < 0)
    return sign + "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
  std::size_t integerDigits = static_cast<std::size_t>(exponent) + 1;
  if (digits.size() <= integerDigits)
    return sign + digits + std::string(integerDigits - digits.size(), '0') + ".0";
  return sign + digits.substr(0, integerDigits) + "." + digits.substr(integerDigits);
}

at::Tensor numbersToStrings(const at::Tensor& x) {
  at::Tensor dense = denseFromPrivateLayout(x).contiguous();
  std::vector<std::string> values;
  values.reserve(static_cast<std::size_t>(dense.numel()));
  if (dense.scalar_type() == at::kBool) {
    for (bool b : std::span(dense.data_ptr<bool>(), static_cast<std::size_t>(dense.numel())))
      values.push_back(b ? "True" : "False");
  } else if (at::isFloatingType(dense.scalar_type())) {
    bool single = dense.scalar_type() != at::kDouble;
    at::Tensor wide = dense.to(at::kDouble);
    for (double v : std::span(wide.data_ptr<double>(), static_cast<std::size_t>(wide.numel())))
      values.push_back(formatFloat(v, single));
  } else if (at::isIntegralType(dense.scalar_type(), false)) {
    at::Tensor wide = dense.to(at::kLong);
    for (std::int64_t v : std::span(wide.data_ptr<std::int64_t>(), static_cast<std::size_t>(wide.numel())))
      values.push_back(std::to_string(v));
  } else {
    throw KernelError("cannot cast " + std::string(c10::toString(dense.scalar_type())) + " to string");
  }
  return makeStringTensor(dense.sizes().vec(), std::move(values));
}

// One string as a number: an optional sign, then what std::from_chars reads (decimal or
// scientific, "inf", "infinity", "nan", any case), the whole string; "True"/"False" for bools.
double parseNumber(const std::string& text, std::size_t index) {
  if (text == "True" || text == "true")
    return 1;
  if (text == "False" || text == "false")
    return 0;
  std::string_view body = text;
  bool negative = !body.empty() && body[0] == '-';
  if (!body.empty() && (body[0] == '+' || body[0] == '-'))
    body.remove_prefix(1);
  double value = 0;
  auto parsed = std::from_chars(body.data(), body.data() + body.size(), value);
  if (body.empty() || body[0] == '-' || parsed.ec != std::errc() || parsed.ptr != body.data() + body.size())
    throw KernelError("string element " + std::to_string(index) + " \"" + text + "\" is not a number");
  return negative ? -value : value;
}

std::int64_t parseInteger(const std::string& text, std::size_t index) {
  std::string_view body = text;
  if (!body.empty() && body[0] == '+')
    body.remove_prefix(1);
  std::int64_t value = 0;
  auto parsed = std::from_chars(body.data(), body.data() + body.size(), value);
  if (parsed.ec == std::errc() && parsed.ptr == body.data() + body.size())
    return value;
  double real = parseNumber(text, index); // "1e3", "True": through double, as numpy does
  if (!(real >= -9.2e18 && real <= 9.2e18))
    throw KernelError("string element " + std::to_string(index) + " \"" + text + "\" is out of int64's range");
  return static_cast<std::int64_t>(real);
}

at::Tensor stringsToNumbers(const at::Tensor& x, at::ScalarType type) {
  std::vector<std::string> values = stringValues(x);
  if (at::isIntegralType(type, false)) {
    std::vector<std::int64_t> ints(values.size());
    for (std::size_t i = 0; i < values.size(); ++i)
      ints[i] = parseInteger(values[i], i);
    return at::tensor(ints, at::kLong).reshape(x.sizes()).to(type);
  }
  std::vector<double> reals(values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    reals[i] = parseNumber(values[i], i);
  return at::tensor(reals, at::kDouble).reshape(x.sizes()).to(type);
}

// ---- StringNormalizer -----------------------------------------------------------------------

// Case mapping on UTF-8 text with the C.UTF-8 locale's Unicode simple case mapping (the same on
// every machine; the node's `locale` attribute is not consulted). Bytes that are not valid UTF-8
// pass through unchanged.
enum class CaseChange : std::uint8_t { None, Lower, Upper };

const std::ctype<wchar_t>* unicodeCase() {
  static const std::locale locale = [] {
    try {
      return std::locale("C.UTF-8");
    } catch (const std::runtime_error&) {
      return std::locale::classic(); // ASCII only
    }
  }();
  return &std::use_facet<std::ctype<wchar_t>>(locale);
}

void appendUtf8(std::string& out, char32_t code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xE0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code >> 18));
    out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
}

// The code point starting at text[i] and its length in bytes; length 0 when the bytes there are
// not valid UTF-8.
std::pair<char32_t, std::size_t> decodeUtf8(std::string_view text, std::size_t i) {
  unsigned char lead = static_cast<unsigned char>(text[i]);
  std::size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
  if (length == 0 || i + length > text.size())
    return {0, 0};
  char32_t code = length == 1 ? lead : lead & (0x7F >> length);
  for (std::size_t k = 1; k < length; ++k) {
    unsigned char next = static_cast<unsigned char>(text[i + k]);
    if ((next & 0xC0) != 0x80)
      return {0, 0};
    code = (code << 6) | (next & 0x3F);
  }
  return {code, length};
}

std::string changeCase(std::string_view text, CaseChange change) {
  if (change == CaseChange::None)
    return std::string(text);
  const std::ctype<wchar_t>* facet = unicodeCase();
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    auto [code, length] = decodeUtf8(text, i);
    if (length == 0) { // not UTF-8: the byte as it is
      out += text[i++];
      continue;
    }
    wchar_t mapped = change == CaseChange::Lower ? facet->tolower(static_cast<wchar_t>(code))
                                                 : facet->toupper(static_cast<wchar_t>(code));
    appendUtf8(out, static_cast<char32_t>(mapped));
    i += length;
  }
  return out;
}

// X [C] or [1, C]: drops the stopwords (compared after lowering both unless is_case_sensitive),
// then changes the case of what is left. All dropped: one empty string ([1] or [1, 1]), as ONNX says.
Outputs stringNormalizer(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  if (!isStringTensor(x))
    throw KernelError("StringNormalizer takes a string tensor");
  if (!(x.dim() == 1 || (x.dim() == 2 && x.size(0) == 1)))
    throw KernelError("StringNormalizer takes shape [C] or [1, C], not " + c10::str(x.sizes()));
  std::string action = c.stringAttr("case_change_action", "NONE");
  CaseChange change = action == "LOWER" ? CaseChange::Lower : action == "UPPER" ? CaseChange::Upper : CaseChange::None;
  if (change == CaseChange::None && action != "NONE")
    throw KernelError("case_change_action must be LOWER, UPPER or NONE, not '" + action + "'");
  bool caseSensitive = c.intAttr("is_case_sensitive", 0) != 0;
  auto key = [&](const std::string& word) { return caseSensitive ? word : changeCase(word, CaseChange::Lower); };
  std::set<std::string> stopwords;
  if (const ir::Attribute* words = c.attribute("stopwords"))
    for (const std::string& word : words->strings)
      stopwords.insert(key(word));
  std::vector<std::string> kept;
  for (const std::string& word : stringValues(x))
    if (!stopwords.count(key(word)))
      kept.push_back(changeCase(word, change));
  if (kept.empty())
    kept.emplace_back();
  std::int64_t count = static_cast<std::int64_t>(kept.size());
  return {makeStringTensor(x.dim() == 1 ? std::vector<std::int64_t>{count} : std::vector<std::int64_t>{1, count},
                           std::move(kept))};
}
// Each output element's pair of flat indices into `a` and `b` under numpy's broadcasting, and the
// broadcast shape: ATen broadcasts two index tensors, since string tensors take no ATen op.
struct BroadcastPairs {
  std::vector<std::int64_t> dims, left, right;
};

BroadcastPairs broadcastPairs(const at::Tensor& a, const at::Tensor& b) {
  auto indices = [](const at::Tensor& t) { return at::arange(t.numel(), at::kLong).reshape(t.sizes()); };
  std::vector<at::Tensor> both = at::broadcast_tensors({indices(a), indices(b)});
  at::Tensor left = both[0].contiguous(), right = both[1].contiguous();
  BroadcastPairs pairs{{left.sizes().begin(), left.sizes().end()}, {}, {}};
  pairs.left.assign(left.data_ptr<std::int64_t>(), left.data_ptr<std::int64_t>() + left.numel());
  pairs.right.assign(right.data_ptr<std::int64_t>(), right.data_ptr<std::int64_t>() + right.numel());
  return pairs;
}

Outputs stringConcat(KernelContext& c) { // StringConcat (opset 20), broadcasting
  std::vector<std::string> a = stringValues(c.input(0)), b = stringValues(c.input(1));
  BroadcastPairs pairs = broadcastPairs(c.input(0), c.input(1));
  std::vector<std::string> joined(pairs.left.size());
  for (std::size_t i = 0; i < joined.size(); ++i)
    joined[i] = a[static_cast<std::size_t>(pairs.left[i])] + b[static_cast<std::size_t>(pairs.right[i])];
  return {makeStringTensor(pairs.dims, std::move(joined))};
}

// A string's parts: split on `delimiter`, keeping empty parts; with no delimiter on runs of
// whitespace, dropping empty parts (Python's str.split); at most `maxsplit` splits (-1: any).
std::vector<std::string> splitString(const std::string& text, const std::string& delimiter, std::int64_t maxsplit) {
  std::vector<std::string> parts;
  std::size_t at = 0;
  if (delimiter.empty()) {
    auto space = [&](std::size_t i) { return std::isspace(static_cast<unsigned char>(text[i])) != 0; };
    while (at < text.size()) {
      while (at < text.size() && space(at))
        ++at;
      if (at == text.size())
        break;
      if (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) == maxsplit) {
        std::size_t end = text.size();
        while (end > at && space(end - 1))
          --end;
        parts.push_back(text.substr(at, end - at));
        break;
      }
      std::size_t end = at;
      while (end < text.size() && !space(end))
        ++end;
      parts.push_back(text.substr(at, end - at));
      at = end;
    }
    return parts;
  }
  for (std::size_t found; (maxsplit < 0 || static_cast<std::int64_t>(parts.size()) < maxsplit) &&
                          (found = text.find(delimiter, at)) != std::string::npos;
       at = found + delimiter.size())
    parts.push_back(text.substr(at, found - at));
  parts.push_back(text.substr(at));
  return parts;
}

Outputs stringSplit(KernelContext& c) { // StringSplit (opset 20): parts padded with "" and their counts
  const at::Tensor& x = c.input(0);
  const std::string delimiter = c.stringAttr("delimiter", "");
  const std::int64_t maxsplit = c.intAttr("maxsplit", -1);
  std::vector<std::vector<std::string>> split;
  std::size_t width = 0;
  for (const std::string& text : stringValues(x)) {
    split.push_back(splitString(text, delimiter, maxsplit));
    width = std::max(width, split.back().size());
  }
  std::vector<std::string> parts;
  at::Tensor counts = at::empty(x.sizes(), at::kLong);
  for (std::size_t i = 0; i < split.size(); ++i) {
    counts.data_ptr<std::int64_t>()[i] = static_cast<std::int64_t>(split[i].size());
    split[i].resize(width);
    parts.insert(parts.end(), split[i].begin(), split[i].end());
  }
  std::vector<std::int64_t> dims(x.sizes().begin(), x.sizes().end());
  dims.push_back(static_cast<std::int64_t>(width));
  return {makeStringTensor(dims, std::move(parts)), counts};
}

// RegexFullMatch (opset 20): RE2's syntax, matched here by std::regex's ECMAScript grammar, which
// reads the common subset (classes, groups, alternation, repetition) the same way.
Outputs regexFullMatch(KernelContext& c) {
  std::regex pattern;
  try {
    pattern = std::regex(c.stringAttr("pattern", ""), std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw KernelError("pattern '" + c.stringAttr("pattern", "") + "' does not compile: " + e.what());
  }
  std::vector<std::string> texts = stringValues(c.input(0));
  at::Tensor matched = at::empty(c.input(0).sizes(), at::kBool);
  for (std::size_t i = 0; i < texts.size(); ++i)
    matched.data_ptr<bool>()[i] = std::regex_match(texts[i], pattern);
  return {matched};
}
// ai.onnx.ml's LabelEncoder (opset 4): each element looked up among the keys (keys_strings,
// keys_int64s, keys_floats or keys_tensor) and replaced by the value at the same position, or the
// default where it is none of them. Keys compare as text: strings as they are, numbers as the
// input's type prints them (integers exactly, floats to 17 digits).
std::vector<std::string> labelKeys(const at::Tensor& t) {
  if (isStringTensor(t))
    return stringValues(t);
  at::Tensor flat = t.reshape({-1}).contiguous();
  std::vector<std::string> keys;
  const bool integral = at::isIntegralType(t.scalar_type(), true);
  at::Tensor numbers = flat.to(integral ? at::kLong : at::kDouble);
  for (std::int64_t i = 0; i < numbers.numel(); ++i) {
    char text[32];
    if (integral)
      std::snprintf(text, sizeof text, "%lld", static_cast<long long>(numbers.data_ptr<std::int64_t>()[i]));
    else
      std::snprintf(text, sizeof text, "%.17g", numbers.data_ptr<double>()[i]);
    keys.emplace_back(text);
  }
  return keys;
}

// The attribute tensor of a LabelEncoder's keys or values: NAME_tensor, or the typed list
// NAME_strings / NAME_int64s / NAME_floats as a 1-D tensor.
at::Tensor labelTable(KernelContext& c, const std::string& name) {
  if (at::Tensor table = c.tensorAttr(name + "_tensor"); table.defined())
    return table;
  if (const ir::Attribute* strings = c.attribute(name + "_strings"))
    return makeStringTensor({static_cast<std::int64_t>(strings->strings.size())}, strings->strings);
  if (const ir::Attribute* ints = c.attribute(name + "_int64s"))
    return at::tensor(ints->ints, at::kLong);
  if (const ir::Attribute* floats = c.attribute(name + "_floats"))
    return at::tensor(std::vector<float>(floats->floats.begin(), floats->floats.end()), at::kFloat);
  throw KernelError("LabelEncoder has no " + name);
}

Outputs labelEncoder(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  at::Tensor keys = labelTable(c, "keys"), values = labelTable(c, "values");
  std::map<std::string, std::int64_t> position;
  std::vector<std::string> keyTexts = labelKeys(isStringTensor(keys) || isStringTensor(x) ? keys : keys.to(x.scalar_type()));
  for (std::size_t i = 0; i < keyTexts.size(); ++i)
    position.emplace(keyTexts[i], static_cast<std::int64_t>(i));
  std::vector<std::string> texts = labelKeys(x);
  std::vector<std::int64_t> picks(texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    auto found = position.find(texts[i]);
    picks[i] = found == position.end() ? -1 : found->second;
  }
  std::vector<std::int64_t> dims(x.sizes().begin(), x.sizes().end());
  if (isStringTensor(values)) {
    std::vector<std::string> table = stringValues(values), out;
    const std::string fallback = c.stringAttr("default_string", "_Unused");
    for (std::int64_t pick : picks)
      out.push_back(pick < 0 ? fallback : table[static_cast<std::size_t>(pick)]);
    return {makeStringTensor(dims, std::move(out))};
  }
  at::Tensor fallback = c.tensorAttr("default_tensor");
  if (!fallback.defined())
    fallback = values.scalar_type() == at::kFloat ? at::scalar_tensor(c.floatAttr("default_float", -0.0f), at::kFloat)
                                                  : at::scalar_tensor(c.intAttr("default_int64", -1), at::kLong);
  at::Tensor table = at::cat({values.reshape({-1}), fallback.reshape({-1}).narrow(0, 0, 1).to(values.scalar_type())});
  at::Tensor index = at::tensor(picks, at::kLong);
  index = at::where(index < 0, at::full_like(index, values.numel()), index);
  return {table.index_select(0, index).reshape(dims)};
}
} // namespace

Outputs stringsEqual(const at::Tensor& a, const at::Tensor& b) {
  std::vector<std::string> left = stringValues(a), right = stringValues(b);
  BroadcastPairs pairs = broadcastPairs(a, b);
  at::Tensor equal = at::empty(pairs.dims, at::kBool);
  for (std::size_t i = 0; i < pairs.left.size(); ++i)
    equal.data_ptr<bool>()[i] = left[static_cast<std::size_t>(pairs.left[i])] == right[static_cast<std::size_t>(pairs.right[i])];
  return {equal};
}

namespace {
// The largest finite value of an 8-bit float that saturates (Cast-19's saturate), else 0.
double saturationBound(ir::DType target) {
  switch (target) {
  case ir::DType::F8E4M3FN: return 448.0;
  case ir::DType::F8E4M3FNUZ: return 240.0;
  case ir::DType::F8E5M2: case ir::DType::F8E5M2FNUZ: return 57344.0;
  default: return 0.0;
  }
}
} // namespace

at::Tensor castTo(const at::Tensor& x, ir::DType target, bool saturate) {
  if (target == ir::DType::String)
    return isStringTensor(x) ? x : numbersToStrings(x);
  at::ScalarType type = onnxScalarType(static_cast<std::int64_t>(target));
  if (isStringTensor(x))
    return stringsToNumbers(x, type);
  // ATen rounds to the nearest 8-bit float and turns what overflows into NaN or infinity (what
  // saturate=0 asks); saturation clamps to the type's largest finite value first. NaN stays NaN.
  if (const double bound = saturate ? saturationBound(target) : 0.0; bound > 0 && at::isFloatingType(x.scalar_type()))
    return x.clamp(-bound, bound).to(type);
  return x.to(type);
}

void registerTextKernels(KernelTable& t) {
  t.add("TfIdfVectorizer", tfIdfVectorizer);
  t.add("StringNormalizer", stringNormalizer);
  t.add("StringConcat", stringConcat);
  t.add("StringSplit", stringSplit);
  t.add("RegexFullMatch", regexFullMatch);
  t.add("ai.onnx.ml::LabelEncoder", labelEncoder);
  t.add("ai.onnx.ml::Binarizer", [](KernelContext& c) -> Outputs { // 1 above the threshold, else 0
    const at::Tensor& x = c.input(0);
    return {(x > c.floatAttr("threshold", 0.0f)).to(x.scalar_type())};
  });
  t.add("ai.onnx.ml::ArrayFeatureExtractor", [](KernelContext& c) -> Outputs { // the last axis' picked entries
    const at::Tensor& x = c.input(0);
    return {x.index_select(-1, c.input(1).reshape({-1}).to(at::kLong))};
  });
}

} // namespace cleave::runtime
