// Tests of the POSIX I/O backend and the fault-injecting wrapper.
#include "tt/storage/io_backend.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "io_test_support.h"
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
  EXPECT_EQ(backend.file_size(handle), 10000u);
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

// A backend whose every read succeeds with the full length, without touching memory.
class CountingBackend final : public IoBackend {
 public:
  int open(const std::string&, bool) override { return 3; }
  ssize_t pread(int, void*, std::size_t length, std::uint64_t) noexcept override {
    return static_cast<ssize_t>(length);
  }
  void close(int) noexcept override {}
  std::uint64_t file_size(int) override { return 1 << 20; }
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

  FaultInjectingIoBackend short_reads(std::make_shared<CountingBackend>(), {IoFault::ShortRead, 1, true, 0});
  EXPECT_EQ(short_reads.pread(0, buffer, 64, 0), 32);
  EXPECT_EQ(short_reads.pread(0, buffer, 1, 0), 1);  // never 0, which would mean the end of the file
  EXPECT_EQ(short_reads.open("x", false), 3);        // open and file_size pass through
  EXPECT_EQ(short_reads.file_size(3), 1u << 20);
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
