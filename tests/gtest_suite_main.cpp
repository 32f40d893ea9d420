// tests/gtest_suite_main.cpp - the entry of a GoogleTest suite built as a library for
// tests/suite_host.cpp (in place of gtest_main's main).
#include <gtest/gtest.h>

extern "C" int cleave_suite_main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
