#include "base/file_io.h"
#include "base/output_directory.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sys/stat.h>
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

TEST_F(FileIoTest, ReadingAFifoOrDeviceIsRefusedWithoutBlocking) {
  std::string fifo = (dir_ / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Expected<std::string> fromFifo = readFile(fifo);
  ASSERT_FALSE(fromFifo);
  EXPECT_NE(fromFifo.error().message().find("a FIFO"), std::string::npos);
  Expected<std::string> fromDevice = readFile("/dev/zero");
  ASSERT_FALSE(fromDevice);
  EXPECT_NE(fromDevice.error().message().find("a device"), std::string::npos);
}

TEST_F(FileIoTest, ReadingIsBoundedBySize) {
  std::string path = (dir_ / "big.json").string();
  ASSERT_TRUE(writeFileAtomically(path, std::string(100, ' ')));
  EXPECT_TRUE(readFile(path, 100));
  Expected<std::string> tooBig = readFile(path, 99);
  ASSERT_FALSE(tooBig);
  EXPECT_EQ(tooBig.error().code(), ErrorCode::InvalidArgument);
}

// OutputDirectory (base/output_directory.h)
class OutputDirectoryTest : public FileIoTest {
protected:
  Expected<OutputDirectory> open(const std::string& path, OutputDirectoryOptions options = {}) {
    return OutputDirectory::open(path, options);
  }
  static std::string read(const fs::path& path) { return *readFile(path.string()); }
};

TEST_F(OutputDirectoryTest, StagingIsInvisibleUntilCommitted) {
  std::string finalDir = (dir_ / "out").string();
  Expected<OutputDirectory> out = open(finalDir);
  ASSERT_TRUE(out);
  ASSERT_TRUE(writeFileAtomically(out->stagingPath() + "/plan.json", "{}"));
  EXPECT_FALSE(fs::exists(finalDir));
  ASSERT_TRUE(out->commit());
  EXPECT_TRUE(fs::exists(finalDir + "/plan.json"));
  EXPECT_NE(read(finalDir + "/" + OutputDirectory::kMarkerName).find("\nplan.json\n"), std::string::npos);
  EXPECT_EQ(entries(), 1u); // no staging directory left
}

TEST_F(OutputDirectoryTest, AbandonedRunLeavesNothing) {
  {
    Expected<OutputDirectory> out = open((dir_ / "out").string());
    ASSERT_TRUE(out);
    ASSERT_TRUE(writeFileAtomically(out->stagingPath() + "/x", "x"));
  }
  EXPECT_EQ(entries(), 0u);
}

TEST_F(OutputDirectoryTest, ReplacesAnEarlierOutputButNotForeignDirectories) {
  std::string finalDir = (dir_ / "out").string();
  for (const char* name : {"first.txt", "second.txt"}) {
    Expected<OutputDirectory> out = open(finalDir);
    ASSERT_TRUE(out) << out.error().message();
    ASSERT_TRUE(writeFileAtomically(out->stagingPath() + "/" + name, name));
    ASSERT_TRUE(out->commit());
  }
  EXPECT_FALSE(fs::exists(finalDir + "/first.txt"));
  EXPECT_TRUE(fs::exists(finalDir + "/second.txt"));
  EXPECT_EQ(entries(), 1u);
  // A file the user added makes it foreign: refused, and kept.
  ASSERT_TRUE(writeFileAtomically(finalDir + "/mine.txt", "keep"));
  Expected<OutputDirectory> refused = open(finalDir);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("not a cleave output"), std::string::npos);
  EXPECT_EQ(read(finalDir + "/mine.txt"), "keep");
  // --force replaces it.
  Expected<OutputDirectory> forced = open(finalDir, {.force = true});
  ASSERT_TRUE(forced);
  ASSERT_TRUE(forced->commit());
  EXPECT_FALSE(fs::exists(finalDir + "/mine.txt"));
}

TEST_F(OutputDirectoryTest, EmptyDirectoryAndTrailingSlashesAreTheDirectoryItself) {
  fs::create_directories(dir_ / "out");
  Expected<OutputDirectory> out = open((dir_ / "out").string() + "//");
  ASSERT_TRUE(out) << out.error().message();
  ASSERT_TRUE(writeFileAtomically(out->stagingPath() + "/a", "a"));
  ASSERT_TRUE(out->commit());
  EXPECT_TRUE(fs::exists(dir_ / "out" / "a"));
  EXPECT_EQ(entries(), 1u);
}

TEST_F(OutputDirectoryTest, ProtectedPlacesAreRefusedEvenWithForce) {
  fs::create_directories(dir_ / "models");
  std::string model = (dir_ / "models" / "m.onnx").string();
  ASSERT_TRUE(writeFileAtomically(model, "x"));
  OutputDirectoryOptions force{.force = true, .inputs = {model}};
  for (std::string path : {std::string("/"), std::string("."), std::string(".."), (dir_ / "models").string(),
                           dir_.string(), (dir_ / "models" / ".").string()}) {
    Expected<OutputDirectory> out = open(path, force);
    EXPECT_FALSE(out) << path;
  }
  EXPECT_TRUE(fs::exists(model));
  ASSERT_TRUE(writeFileAtomically((dir_ / "file").string(), "x"));
  EXPECT_FALSE(open((dir_ / "file").string(), force)); // not a directory
  fs::create_directory_symlink(dir_ / "models", dir_ / "link");
  EXPECT_FALSE(open((dir_ / "link").string(), force)); // a symbolic link
}

TEST_F(OutputDirectoryTest, SecondWriterFailsAndFirstStaysWhole) {
  std::string finalDir = (dir_ / "out").string();
  Expected<OutputDirectory> first = open(finalDir), second = open(finalDir);
  ASSERT_TRUE(first);
  ASSERT_TRUE(second);
  ASSERT_TRUE(writeFileAtomically(first->stagingPath() + "/who", "first"));
  ASSERT_TRUE(writeFileAtomically(second->stagingPath() + "/who", "second"));
  ASSERT_TRUE(first->commit());
  Status late = second->commit();
  ASSERT_FALSE(late);
  EXPECT_NE(late.error().message().find("changed while this run was writing"), std::string::npos);
  EXPECT_EQ(read(finalDir + "/who"), "first");
}

} // namespace
} // namespace cleave
