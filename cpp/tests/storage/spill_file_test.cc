// Tests of spill files and their pool: reuse, never shared while in use, closed with the pool
// or their last handle, and nothing left in the directory.
#include "tt/storage/spill_file.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <vector>

#include "io_test_support.h"
#include "tt/common/error.h"

namespace tt {
namespace {

// The POSIX backend, counting the spill files open now.
class OpenCountingBackend final : public IoBackend {
 public:
  int open(const std::string& path, bool direct) override { return posix_.open(path, direct); }
  ssize_t pread(int handle, void* destination, std::size_t length, std::uint64_t offset) noexcept override {
    return posix_.pread(handle, destination, length, offset);
  }
  int open_for_spill(const std::string& directory) override {
    const int handle = posix_.open_for_spill(directory);
    ++open_;
    return handle;
  }
  ssize_t pwrite(int handle, const void* source, std::size_t length, std::uint64_t offset) noexcept override {
    return posix_.pwrite(handle, source, length, offset);
  }
  int truncate(int handle) noexcept override {
    ++truncated_;
    return posix_.truncate(handle);
  }
  void close(int handle) noexcept override {
    --open_;
    posix_.close(handle);
  }
  FileIdentity identity(int handle) override { return posix_.identity(handle); }

  int open_now() const { return open_.load(); }
  int truncated() const { return truncated_.load(); }

 private:
  PosixIoBackend posix_;
  std::atomic<int> open_{0};
  std::atomic<int> truncated_{0};
};

TEST(SpillFilePoolTest, ReusesAFileAndNeverHandsOutOneInUse) {
  test::TempDir dir;
  SpillFilePool pool(std::make_shared<PosixIoBackend>(), dir.root());
  auto first = pool.acquire();
  auto second = pool.acquire();
  EXPECT_NE(first->handle(), second->handle());
  EXPECT_EQ(first->name(), "the spill file in '" + dir.root() + "'");
  const int reused = first->handle();
  first.reset();
  EXPECT_EQ(pool.acquire()->handle(), reused);
  EXPECT_EQ(pool.created(), 2u);
  EXPECT_TRUE(std::filesystem::is_empty(dir.root()));
}

TEST(SpillFilePoolTest, FilesCloseWithThePoolOrWithTheirLastHandle) {
  test::TempDir dir;
  auto backend = std::make_shared<OpenCountingBackend>();
  auto pool = std::make_unique<SpillFilePool>(backend, dir.root());
  auto held = pool->acquire();
  pool->acquire();  // back on the shelf at once
  EXPECT_EQ(backend->open_now(), 2);
  pool.reset();  // closes the pooled one
  EXPECT_EQ(backend->open_now(), 1);
  const char byte = 7;
  EXPECT_EQ(backend->pwrite(held->handle(), &byte, 1, 0), 1);  // a handle outlives its pool
  held.reset();
  EXPECT_EQ(backend->open_now(), 0);
  EXPECT_TRUE(std::filesystem::is_empty(dir.root()));
}

TEST(SpillFilePoolTest, AFileComesBackEmpty) {
  test::TempDir dir;
  auto backend = std::make_shared<OpenCountingBackend>();
  SpillFilePool pool(backend, dir.root());
  auto file = pool.acquire();
  const std::vector<char> bytes(1 << 16, 3);
  ASSERT_EQ(backend->pwrite(file->handle(), bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  EXPECT_EQ(backend->identity(file->handle()).size, bytes.size());
  const int handle = file->handle();
  file.reset();
  EXPECT_EQ(backend->truncated(), 1);
  auto again = pool.acquire();
  EXPECT_EQ(again->handle(), handle);
  EXPECT_EQ(backend->identity(again->handle()).size, 0u);
}

TEST(SpillFilePoolTest, AMissingDirectoryIsNotFoundAndAnEmptyOneIsRefused) {
  test::TempDir dir;
  SpillFilePool pool(std::make_shared<PosixIoBackend>(), dir.path("missing"));
  try {
    pool.acquire();
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::NotFound);
    EXPECT_NE(std::string(error.what()).find(dir.path("missing")), std::string::npos) << error.what();
  }
  EXPECT_EQ(pool.created(), 0u);
  EXPECT_THROW(SpillFilePool(std::make_shared<PosixIoBackend>(), ""), Error);
}

}  // namespace
}  // namespace tt
