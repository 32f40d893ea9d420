// base/expected.h - cleave's error model: a checked Error and Expected<T>.
// Expected<T> uses the member names of C++23 std::expected (has_value, value, error, *, ->), so a
// later switch to std::expected is a rename. Nothing in cleave throws; foreign exceptions are caught
// where they arise (protobuf/JSON parsers in io/, ATen in runtime/) and turned into Errors there.
// Complexity: checks and moves are O(1); an Error costs its message text, built only on failure.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace cleave {

enum class ErrorCode : std::uint8_t {
  InvalidArgument, // bad option or flag value
  NotFound,        // a file, node or value that should exist does not
  ParseError,      // corrupt or malformed input file
  InvalidGraph,    // cycles, dangling references, duplicate names, bad arity
  Unsupported,     // valid input that cleave does not handle (yet)
  DoesNotFit,      // memory limits cannot be met
  IoError,         // reading or writing failed
  Usage,           // a command line that cannot run as given (the CLI exits 2, not 1)
};


// An ordinary, reportable failure. Messages are lower case, without a final period, and name the
// thing at fault (file, node, value). Extra context is appended with `<<`.
class [[nodiscard]] Error {
public:
  explicit Error(ErrorCode code, std::string message = {})
      : code_(code), message_(std::move(message)) {}

  template <typename T> Error& operator<<(const T& part) & {
    std::ostringstream stream;
    stream << part;
    message_ += stream.str();
    return *this;
  }
  template <typename T> Error&& operator<<(const T& part) && {
    *this << part;
    return std::move(*this);
  }

  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // Prefixes context, e.g. the file being read: "model.onnx: <message>".
  Error& withContext(const std::string& context) {
    message_ = context + ": " + message_;
    return *this;
  }

private:
  ErrorCode code_;
  std::string message_;
};

template <typename T> class [[nodiscard]] Expected {
public:
  Expected(T value) : state_(std::in_place_index<0>, std::move(value)) {}
  Expected(Error error) : state_(std::in_place_index<1>, std::move(error)) {}

  bool has_value() const { return state_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  Error& error() & { return std::get<1>(state_); }
  const Error& error() const& { return std::get<1>(state_); }
  Error&& error() && { return std::get<1>(std::move(state_)); }

private:
  std::variant<T, Error> state_;
};

// Expected<void>: success or an Error.
template <> class [[nodiscard]] Expected<void> {
public:
  Expected() = default;
  Expected(Error error) : error_(std::move(error)), failed_(true) {}
  bool has_value() const { return !failed_; }
  explicit operator bool() const { return has_value(); }
  Error& error() & { return error_; }
  const Error& error() const& { return error_; }
  Error&& error() && { return std::move(error_); }

private:
  Error error_{ErrorCode::InvalidArgument};
  bool failed_ = false;
};

using Status = Expected<void>;

[[noreturn]] void assertionFailed(const char* condition, const char* why, const char* file,
                                  int line);

} // namespace cleave

// A broken invariant is a bug, never an Error: abort with the reason.
#define CLEAVE_ASSERT(cond, why)                                                                   \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      ::cleave::assertionFailed(#cond, why, __FILE__, __LINE__);                                   \
  } while (0)

#define CLEAVE_CONCAT_INNER(a, b) a##b
#define CLEAVE_CONCAT(a, b) CLEAVE_CONCAT_INNER(a, b)

// CLEAVE_TRY(Graph graph, readModel(path)); returns the Error from the enclosing function on failure.
#define CLEAVE_TRY(decl, expr)                                                                     \
  auto CLEAVE_CONCAT(cleaveTry_, __LINE__) = (expr);                                               \
  if (!CLEAVE_CONCAT(cleaveTry_, __LINE__))                                                        \
    return std::move(CLEAVE_CONCAT(cleaveTry_, __LINE__)).error();                                 \
  decl = std::move(*CLEAVE_CONCAT(cleaveTry_, __LINE__))

// CLEAVE_CHECK(status_expr); for Status-returning calls.
#define CLEAVE_CHECK(expr)                                                                         \
  do {                                                                                             \
    auto cleaveCheck = (expr);                                                                     \
    if (!cleaveCheck)                                                                              \
      return std::move(cleaveCheck).error();                                                       \
  } while (0)
