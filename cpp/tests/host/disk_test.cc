// Tests of the filesystem space probe and the read-bandwidth measurement.
#include "tt/host/disk.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "fake_tree.h"
#include "tt/common/error.h"

namespace tt {
namespace {

using test::FakeTree;

TEST(DiskTest, ReportsSpaceOfATemporaryDirectory) {
  FakeTree tree;
  const DiskSpace space = probe_disk(tree.path());
  EXPECT_GT(space.total_bytes, 0);
  EXPECT_GT(space.free_bytes, 0);
  EXPECT_LE(space.free_bytes, space.total_bytes);
}

TEST(DiskTest, TellsAFilesystemInMemoryFromOthers) {
  EXPECT_FALSE(probe_disk("/proc").in_memory);  // procfs: neither tmpfs nor ramfs
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  EXPECT_TRUE(probe_disk("/dev/shm").in_memory);  // tmpfs wherever it exists
}

TEST(DiskTest, MissingPathIsAnIoErrorNamingIt) {
  FakeTree tree;
  try {
    probe_disk(tree.path("missing/dir"));
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::IO);
    EXPECT_NE(std::string(error.what()).find(tree.path("missing/dir")), std::string::npos);
  }
}

std::size_t entries_in(const std::string& directory) {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(directory)) ++count;
  return count;
}

TEST(ReadBandwidthTest, MeasuresAndLeavesNoFileBehind) {
  FakeTree tree;
  tree.write("keep", "x");
  const ReadBandwidth bandwidth = measure_read_bandwidth(tree.path(), 3 * 1024 * 1024 + 1);
  EXPECT_GT(bandwidth.bytes_per_second, 0);
  EXPECT_EQ(bandwidth.bytes, 4 * 1024 * 1024);
  EXPECT_EQ(entries_in(tree.path()), 1u);
}

TEST(ReadBandwidthTest, WorksOnTmpfsToo) {
  // /dev/shm is tmpfs, which refuses O_DIRECT on older kernels: either way it must measure.
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const std::size_t before = entries_in("/dev/shm");
  const ReadBandwidth bandwidth = measure_read_bandwidth("/dev/shm", 1);
  EXPECT_GT(bandwidth.bytes_per_second, 0);
  EXPECT_EQ(bandwidth.bytes, 1024 * 1024);
  EXPECT_EQ(entries_in("/dev/shm"), before);
}

TEST(ReadBandwidthTest, RejectsBadArgumentsAndCleansUpOnFailure) {
  FakeTree tree;
  try {
    measure_read_bandwidth(tree.path(), 0);
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
  }
  try {
    measure_read_bandwidth(tree.path("missing"), 1);
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::IO);
    EXPECT_NE(std::string(error.what()).find(tree.path("missing")), std::string::npos);
  }
  EXPECT_EQ(entries_in(tree.path()), 0u);
}

}  // namespace
}  // namespace tt
