// base/isolated_call_test.cpp - what runIsolated returns for each way a body can end: its result,
// an exception, a crash, a hang. onnx's shape inference and inliner run this way
// (io/onnx_reader.cpp, io/onnx_functions.cpp); no input is known to crash onnx 1.23's, so the
// crash is made here.
#include "base/isolated_call.h"

#include <gtest/gtest.h>

#include <csignal>
#include <stdexcept>
#include <unistd.h>

namespace cleave {
namespace {

TEST(IsolatedCall, ReturnsTheBodysResult) {
  Expected<std::string> reply = runIsolated("echo", [] { return std::string("a\0b", 3); });
  ASSERT_TRUE(reply) << reply.error().message();
  EXPECT_EQ(*reply, std::string("a\0b", 3));
}

TEST(IsolatedCall, AnExceptionIsAFailureNamingIt) {
  Expected<std::string> reply = runIsolated("the thrower", []() -> std::string { throw std::runtime_error("bad model"); });
  ASSERT_FALSE(reply);
  EXPECT_NE(reply.error().message().find("the thrower failed"), std::string::npos) << reply.error().message();
  EXPECT_NE(reply.error().message().find("bad model"), std::string::npos);
}

TEST(IsolatedCall, ACrashIsAnErrorNotACrashedCaller) {
  Expected<std::string> reply = runIsolated("the crasher", []() -> std::string {
    std::raise(SIGSEGV);
    return "unreached";
  });
  ASSERT_FALSE(reply);
  EXPECT_NE(reply.error().message().find("the crasher crashed on this input"), std::string::npos)
      << reply.error().message();
}

TEST(IsolatedCall, AHangEndsAtItsLimit) {
  Expected<std::string> reply = runIsolated("the sleeper", []() -> std::string {
    ::sleep(30);
    return "unreached";
  }, 1);
  ASSERT_FALSE(reply);
  EXPECT_NE(reply.error().message().find("the sleeper did not finish in 1 s"), std::string::npos)
      << reply.error().message();
}

} // namespace
} // namespace cleave
