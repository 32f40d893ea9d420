#include "base/file_io.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace cleave {
namespace {
namespace fs = std::filesystem;

class FileIoTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cleave_file_io_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::size_t entries() const {
    return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }
  fs::path dir_;
};

TEST_F(FileIoTest, WriteThenReadRoundTrips) {
  std::string path = (dir_ / "a.bin").string();
  std::string data("bytes\0with zero", 15);
  ASSERT_TRUE(writeFileAtomically(path, data));
  Expected<std::string> back = readFile(path);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, data);
  EXPECT_EQ(entries(), 1u); // no temporary left behind
}

TEST_F(FileIoTest, ReadingAMissingFileNamesIt) {
  Expected<std::string> result = readFile((dir_ / "missing.onnx").string());
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code(), ErrorCode::NotFound);
  EXPECT_NE(result.error().message().find("missing.onnx"), std::string::npos);
}

TEST_F(FileIoTest, WritingIntoAMissingDirectoryFailsCleanly) {
  Status status = writeFileAtomically((dir_ / "no" / "such" / "file").string(), "x");
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code(), ErrorCode::IoError);
  EXPECT_EQ(entries(), 0u);
}

TEST_F(FileIoTest, StagingDirectoryIsInvisibleUntilCommitted) {
  std::string finalDir = (dir_ / "out").string();
  Expected<std::string> staging = makeStagingDirectory(finalDir);
  ASSERT_TRUE(staging);
  ASSERT_TRUE(writeFileAtomically(*staging + "/plan.json", "{}"));
  EXPECT_FALSE(fs::exists(finalDir));
  ASSERT_TRUE(commitDirectory(*staging, finalDir));
  EXPECT_TRUE(fs::exists(finalDir + "/plan.json"));
  EXPECT_FALSE(fs::exists(*staging));
}

TEST_F(FileIoTest, CommitReplacesAnOldOutputDirectory) {
  std::string finalDir = (dir_ / "out").string();
  fs::create_directories(finalDir);
  std::ofstream(finalDir + "/stale.txt") << "old";
  Expected<std::string> staging = makeStagingDirectory(finalDir);
  ASSERT_TRUE(staging);
  ASSERT_TRUE(writeFileAtomically(*staging + "/new.txt", "new"));
  ASSERT_TRUE(commitDirectory(*staging, finalDir));
  EXPECT_FALSE(fs::exists(finalDir + "/stale.txt"));
  EXPECT_TRUE(fs::exists(finalDir + "/new.txt"));
}

TEST_F(FileIoTest, DiscardLeavesNothing) {
  Expected<std::string> staging = makeStagingDirectory((dir_ / "out").string());
  ASSERT_TRUE(staging);
  ASSERT_TRUE(writeFileAtomically(*staging + "/x", "x"));
  discardDirectory(*staging);
  EXPECT_EQ(entries(), 0u);
}

TEST_F(FileIoTest, StagingUnderAMissingParentFails) {
  Expected<std::string> staging = makeStagingDirectory((dir_ / "nope" / "out").string());
  ASSERT_FALSE(staging);
  EXPECT_EQ(staging.error().code(), ErrorCode::IoError);
}

} // namespace
} // namespace cleave
