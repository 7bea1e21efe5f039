// Tests of file identities: stable while nothing writes, moved by a write or a replacement.
#include "tt/common/file_identity.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "../storage/io_test_support.h"
#include "tt/common/error.h"
#include "tt/common/os_resources.h"

namespace tt {
namespace {

TEST(FileIdentityTest, StableUntilAWriteOrAReplacement) {
  test::TempDir dir;
  const std::string path = dir.path("a.bin"), other = dir.path("b.bin");
  test::write_file(path, test::random_bytes(5000, 1));
  const FileIdentity first = file_identity(path);
  EXPECT_EQ(first.size, 5000u);
  EXPECT_EQ(file_identity(path), first);
  const UniqueFd handle(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_EQ(file_identity(handle.get()), first) << "by descriptor as by path";

  test::write_file(other, test::random_bytes(5000, 1));  // same size and bytes, another inode
  ASSERT_EQ(std::rename(other.c_str(), path.c_str()), 0);
  const FileIdentity replaced = file_identity(path);
  EXPECT_NE(replaced.inode, first.inode);
  EXPECT_EQ(file_identity(handle.get()).inode, first.inode) << "the open descriptor still reads the old file";
  EXPECT_NE(file_identity(handle.get()), first) << "whose change time moved as its last link went";

  test::write_file(path, test::random_bytes(4000, 2));  // rewritten in place: size and times move
  EXPECT_NE(file_identity(path), replaced);
}

TEST(FileIdentityTest, AJustWrittenFileIsNotSettled) {
  test::TempDir dir;
  test::write_file(dir.path("a.bin"), test::random_bytes(100, 1));
  const FileIdentity identity = file_identity(dir.path("a.bin"));
  EXPECT_FALSE(settled(identity));
  EXPECT_TRUE(settled(identity, 0));
}

TEST(FileIdentityTest, AMissingFileIsNotFound) {
  test::TempDir dir;
  const Error error = test::error_of([&] { file_identity(dir.path("missing")); });
  EXPECT_EQ(error.code(), ErrorCode::NotFound);
  EXPECT_TRUE(test::contains(error, "missing")) << error.what();
}

}  // namespace
}  // namespace tt
