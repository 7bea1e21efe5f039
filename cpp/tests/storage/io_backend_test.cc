// Tests of the POSIX I/O backend (reads, anonymous spill files) and the fault-injecting wrapper.
#include "tt/storage/io_backend.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "io_test_support.h"
#include "tt/common/aligned_buffer.h"
#include "tt/common/error.h"
#include "tt/common/os_resources.h"

namespace tt {
namespace {

using test::TempDir;

TEST(PosixIoBackendTest, OpensReadsAndSizesAFile) {
  TempDir dir;
  const auto bytes = test::random_bytes(10000, 1);
  test::write_file(dir.path("f"), bytes);
  PosixIoBackend backend;
  const int handle = backend.open(dir.path("f"), false);
  EXPECT_EQ(backend.identity(handle).size, 10000u);
  std::vector<std::uint8_t> out(100);
  EXPECT_EQ(backend.pread(handle, out.data(), out.size(), 5000), 100);
  EXPECT_EQ(0, std::memcmp(out.data(), bytes.data() + 5000, 100));
  EXPECT_EQ(backend.pread(handle, out.data(), out.size(), 9950), 50);  // short at the end: legal
  EXPECT_EQ(backend.pread(handle, out.data(), out.size(), 10000), 0);
  backend.close(handle);
  EXPECT_EQ(backend.pread(handle, out.data(), out.size(), 0), -EBADF);  // errors come back as -errno
}

TEST(PosixIoBackendTest, MissingFileIsNotFoundNamingThePath) {
  TempDir dir;
  PosixIoBackend backend;
  try {
    backend.open(dir.path("missing"), false);
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::NotFound);
    EXPECT_NE(std::string(error.what()).find(dir.path("missing")), std::string::npos);
  }
}

TEST(PosixIoBackendTest, DirectOpenWorksOrSaysTheFilesystemRefusesIt) {
  TempDir dir;
  const auto bytes = test::random_bytes(8192, 2);
  test::write_file(dir.path("f"), bytes);
  PosixIoBackend backend;
  try {
    const int handle = backend.open(dir.path("f"), true);
    const AlignedBuffer out(4096, 4096);
    EXPECT_EQ(backend.pread(handle, out.data(), 4096, 4096), 4096);
    EXPECT_EQ(0, std::memcmp(out.data(), bytes.data() + 4096, 4096));
    backend.close(handle);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Incompatible) << error.what();
  }
}

// The names in `directory`.
std::vector<std::string> names_in(const std::string& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) names.push_back(entry.path().string());
  return names;
}

// Writes `bytes` to a spill file at `offset`, reads them back, and checks its size.
void round_trip(IoBackend& backend, int handle, const std::vector<std::uint8_t>& bytes, std::uint64_t offset) {
  ASSERT_EQ(backend.pwrite(handle, bytes.data(), bytes.size(), offset), static_cast<ssize_t>(bytes.size()));
  std::vector<std::uint8_t> back(bytes.size());
  ASSERT_EQ(backend.pread(handle, back.data(), back.size(), offset), static_cast<ssize_t>(back.size()));
  EXPECT_EQ(back, bytes);
  EXPECT_EQ(backend.identity(handle).size, offset + bytes.size());
}

TEST(PosixIoBackendTest, ASpillFileIsWrittenAndReadBackAndNothingNamesIt) {
  TempDir dir;
  PosixIoBackend backend;
  const int handle = backend.open_for_spill(dir.root());
  round_trip(backend, handle, test::random_bytes(10000, 3), 4096);
  EXPECT_TRUE(names_in(dir.root()).empty());
  backend.close(handle);
  EXPECT_TRUE(names_in(dir.root()).empty());
}

TEST(PosixIoBackendTest, TheFallbackUnlinksItsFileAtOnce) {
  TempDir dir;
  PosixIoBackend backend;
  const int handle = create_unlinked_spill_file(dir.root());
  round_trip(backend, handle, test::random_bytes(5000, 4), 100);
  EXPECT_TRUE(names_in(dir.root()).empty());
  backend.close(handle);
}

TEST(PosixIoBackendTest, WithOTmpfileNoNameEverAppears) {
  TempDir dir;
  if (!test::supports_o_tmpfile(dir.root())) GTEST_SKIP() << "the filesystem of " << dir.root() << " lacks O_TMPFILE";
  PosixIoBackend backend;
  test::CreationWatch watch(dir.root());
  backend.close(backend.open_for_spill(dir.root()));
  EXPECT_TRUE(watch.created().empty());
  backend.close(create_unlinked_spill_file(dir.root()));  // the watch does see the fallback's name
  EXPECT_EQ(watch.created().size(), 1u);
}

TEST(PosixIoBackendTest, ASpillFileInAMissingDirectoryIsNotFoundNamingIt) {
  TempDir dir;
  PosixIoBackend backend;
  const std::string missing = dir.path("missing");
  for (const auto& create : {std::function<int()>([&] { return backend.open_for_spill(missing); }),
                             std::function<int()>([&] { return create_unlinked_spill_file(missing); })}) {
    try {
      backend.close(create());
      FAIL() << "no error";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::NotFound);
      EXPECT_NE(std::string(error.what()).find(missing), std::string::npos) << error.what();
    }
  }
}

// A backend whose every read and write succeeds with the full length, without touching memory.
class CountingBackend final : public IoBackend {
 public:
  int open(const std::string&, bool) override { return 3; }
  ssize_t pread(int, void*, std::size_t length, std::uint64_t) noexcept override {
    return static_cast<ssize_t>(length);
  }
  int open_for_spill(const std::string&) override { return 4; }
  ssize_t pwrite(int, const void*, std::size_t length, std::uint64_t) noexcept override {
    return static_cast<ssize_t>(length);
  }
  int truncate(int) noexcept override { return 0; }
  void close(int) noexcept override {}
  FileIdentity identity(int) override { return {.size = 1 << 20}; }
};

TEST(FaultInjectingIoBackendTest, FailsTheNthCallOnlyOrEveryCallFromIt) {
  char buffer[64];
  FaultInjectingIoBackend once(std::make_shared<CountingBackend>(), {IoFault::Eio, 2, false, 0});
  EXPECT_EQ(once.pread(0, buffer, 64, 0), 64);
  EXPECT_EQ(once.pread(0, buffer, 64, 0), -EIO);
  EXPECT_EQ(once.pread(0, buffer, 64, 0), 64);
  EXPECT_EQ(once.pread_calls(), 3);

  FaultInjectingIoBackend always(std::make_shared<CountingBackend>(), {IoFault::Enospc, 2, true, 0});
  EXPECT_EQ(always.pread(0, buffer, 64, 0), 64);
  EXPECT_EQ(always.pread(0, buffer, 64, 0), -ENOSPC);
  EXPECT_EQ(always.pread(0, buffer, 64, 0), -ENOSPC);

  FaultInjectingIoBackend short_reads(std::make_shared<CountingBackend>(), {IoFault::Short, 1, true, 0});
  EXPECT_EQ(short_reads.pread(0, buffer, 64, 0), 32);
  EXPECT_EQ(short_reads.pread(0, buffer, 1, 0), 1);  // never 0, which would mean the end of the file
  EXPECT_EQ(short_reads.open("x", false), 3);        // open, open_for_spill and identity pass through
  EXPECT_EQ(short_reads.open_for_spill("x"), 4);
  EXPECT_EQ(short_reads.identity(3).size, 1u << 20);
}

TEST(FaultInjectingIoBackendTest, WritesGetThePlanWithTheirOwnCount) {
  const char buffer[64] = {};
  char out[64];
  FaultInjectingIoBackend both(std::make_shared<CountingBackend>(), {IoFault::Enospc, 2, false, 0});
  EXPECT_EQ(both.pread(0, out, 64, 0), 64);
  EXPECT_EQ(both.pwrite(0, buffer, 64, 0), 64);      // the first write, whatever the reads did
  EXPECT_EQ(both.pwrite(0, buffer, 64, 0), -ENOSPC);
  EXPECT_EQ(both.pwrite(0, buffer, 64, 0), 64);
  EXPECT_EQ(both.pread(0, out, 64, 0), -ENOSPC);     // the second read
  EXPECT_EQ(both.pread_calls(), 2);
  EXPECT_EQ(both.pwrite_calls(), 3);

  FaultInjectingIoBackend writes(std::make_shared<CountingBackend>(),
                                 {.fault = IoFault::Eio, .at_call = 1, .repeat = true, .reads = false});
  EXPECT_EQ(writes.pread(0, out, 64, 0), 64);        // reads are not planned, but counted
  EXPECT_EQ(writes.pwrite(0, buffer, 64, 0), -EIO);
  EXPECT_EQ(writes.pwrite(0, buffer, 64, 0), -EIO);
  EXPECT_EQ(writes.pread_calls(), 1);

  FaultInjectingIoBackend short_writes(std::make_shared<CountingBackend>(),
                                       {.fault = IoFault::Short, .repeat = true, .writes = true});
  EXPECT_EQ(short_writes.pwrite(0, buffer, 64, 0), 32);
  EXPECT_EQ(short_writes.pwrite(0, buffer, 1, 0), 1);

  FaultInjectingIoBackend reads(std::make_shared<CountingBackend>(),
                                {.fault = IoFault::Eio, .repeat = true, .writes = false});
  EXPECT_EQ(reads.pwrite(0, buffer, 64, 0), 64);
  EXPECT_EQ(reads.pread(0, out, 64, 0), -EIO);
}

TEST(FaultInjectingIoBackendTest, CountsCallsAcrossThreadsSoExactlyOneFails) {
  FaultInjectingIoBackend backend(std::make_shared<CountingBackend>(), {IoFault::Eio, 250, false, 0});
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      char buffer[8];
      for (int i = 0; i < 100; ++i) failures += backend.pread(0, buffer, 8, 0) < 0;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 1);
  EXPECT_EQ(backend.pread_calls(), 400);
}

TEST(FaultInjectingIoBackendTest, RejectsABadPlan) {
  for (const FaultPlan& plan : {FaultPlan{IoFault::Eio, 0, false, 0}, FaultPlan{IoFault::Eio, 1, false, -1}}) {
    try {
      FaultInjectingIoBackend backend(std::make_shared<CountingBackend>(), plan);
      FAIL() << "no error";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    }
  }
  EXPECT_THROW(FaultInjectingIoBackend(nullptr, {}), Error);
}

}  // namespace
}  // namespace tt
