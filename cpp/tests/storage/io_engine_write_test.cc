// Tests of the I/O engine's writes and reads of an open handle (spill files): bytes, short
// writes, faults naming the file, malformed requests and cancellation.
#include "tt/storage/io_engine.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "io_test_support.h"
#include "tt/common/error.h"

namespace tt {
namespace {

using test::contains;
using test::error_of;
using test::TempDir;

// submit_write() and wait, rethrowing the request's error (moved out under the lock, as
// IoEngine::read does, so the I/O thread keeps no reference to it).
void write(IoEngine& engine, WriteRequest request, CancelFlag cancel = nullptr) {
  struct Done {
    std::mutex mutex;
    std::condition_variable changed;
    bool done = false;
    std::exception_ptr error;
  };
  auto done = std::make_shared<Done>();
  engine.submit_write(std::move(request), [done](std::exception_ptr error) {
    std::lock_guard lock(done->mutex);
    done->error = std::move(error);
    done->done = true;
    done->changed.notify_one();
  }, std::move(cancel));
  std::exception_ptr error;
  {
    std::unique_lock lock(done->mutex);
    done->changed.wait(lock, [&] { return done->done; });
    error = std::move(done->error);
  }
  if (error) std::rethrow_exception(std::move(error));
}

// A spill file in a temporary directory, opened through `backend`, closed at the end.
struct SpillTarget {
  explicit SpillTarget(std::shared_ptr<IoBackend> io) : backend(std::move(io)), handle(backend->open_for_spill(dir.root())) {}
  ~SpillTarget() { backend->close(handle); }
  std::string name() const { return "the spill file in '" + dir.root() + "'"; }

  TempDir dir;
  std::shared_ptr<IoBackend> backend;
  int handle;
};

ReadRequest handle_read(const SpillTarget& file, std::uint64_t offset, std::vector<std::uint8_t>& out) {
  ReadRequest request;
  request.path = file.name();
  request.offset = offset;
  request.length = out.size();
  request.destination = out.data();
  request.handle = file.handle;
  return request;
}

TEST(IoEngineWriteTest, WritesInPiecesAndReadsBackThroughTheHandle) {
  SpillTarget file(std::make_shared<PosixIoBackend>());
  IoEngine engine({.threads = 4, .queue_depth = 4, .chunk_bytes = 4096, .mode = IoMode::Auto}, file.backend);
  const auto bytes = test::random_bytes(100000, 5);
  write(engine, {.handle = file.handle, .offset = 1000, .length = bytes.size(), .source = bytes.data(),
                 .name = file.name()});
  EXPECT_EQ(engine.stats().bytes_written, bytes.size());
  EXPECT_EQ(engine.stats().pieces, 25u);  // [1000, 101000) on a 4096 grid

  std::vector<std::uint8_t> back(bytes.size());
  engine.read(handle_read(file, 1000, back));
  EXPECT_EQ(back, bytes);
  std::vector<std::uint8_t> middle(777);
  engine.read(handle_read(file, 50000, middle));
  EXPECT_EQ(0, std::memcmp(middle.data(), bytes.data() + 49000, middle.size()));
  EXPECT_EQ(engine.stats().direct_bytes, 0u);  // a handle is read through the page cache
  EXPECT_TRUE(engine.direct_fallback_reason().empty());

  // Direct mode too: no alignment asked of a handle read, which never goes direct.
  IoEngine direct({.threads = 1, .queue_depth = 1, .chunk_bytes = 4096, .mode = IoMode::Direct}, file.backend);
  direct.read(handle_read(file, 1001, middle));
  EXPECT_EQ(0, std::memcmp(middle.data(), bytes.data() + 1, middle.size()));
}

TEST(IoEngineWriteTest, ShortWritesAreRetriedToTheRightBytes) {
  auto faulty = std::make_shared<FaultInjectingIoBackend>(
      std::make_shared<PosixIoBackend>(), FaultPlan{.fault = IoFault::Short, .repeat = true, .reads = false});
  SpillTarget file(faulty);
  IoEngine engine({.threads = 2, .queue_depth = 2, .chunk_bytes = 4096, .mode = IoMode::Buffered}, faulty);
  const auto bytes = test::random_bytes(5 * 4096, 6);
  write(engine, {.handle = file.handle, .offset = 0, .length = bytes.size(), .source = bytes.data(),
                 .name = file.name()});
  EXPECT_GT(faulty->pwrite_calls(), 5 * 5);  // every piece needed several writes
  std::vector<std::uint8_t> back(bytes.size());
  engine.read(handle_read(file, 0, back));
  EXPECT_EQ(back, bytes);
}

struct WriteFault {
  IoFault fault;
  int error;
};

class IoEngineWriteFaultTest : public ::testing::TestWithParam<WriteFault> {};

TEST_P(IoEngineWriteFaultTest, TheNthWriteFailsNamingFileOffsetLengthAndReasonAndTheEngineGoesOn) {
  auto faulty = std::make_shared<FaultInjectingIoBackend>(
      std::make_shared<PosixIoBackend>(), FaultPlan{.fault = GetParam().fault, .at_call = 3, .reads = false});
  SpillTarget file(faulty);
  IoEngine engine({.threads = 1, .queue_depth = 1, .chunk_bytes = 4096, .mode = IoMode::Buffered}, faulty);
  const auto bytes = test::random_bytes(16 * 4096, 7);
  const WriteRequest request{.handle = file.handle, .offset = 0, .length = bytes.size(), .source = bytes.data(),
                             .name = file.name()};
  const Error error = error_of([&] { write(engine, request); });
  EXPECT_EQ(error.code(), ErrorCode::IO);
  EXPECT_TRUE(contains(error, "write the spill file in '" + file.dir.root() + "'")) << error.what();
  EXPECT_TRUE(contains(error, "at offset 8192, length 4096")) << error.what();
  EXPECT_TRUE(contains(error, std::strerror(GetParam().error))) << error.what();
  EXPECT_EQ(faulty->pwrite_calls(), 3);  // one thread: the remaining 13 pieces were skipped

  write(engine, request);
  std::vector<std::uint8_t> back(bytes.size());
  engine.read(handle_read(file, 0, back));
  EXPECT_EQ(back, bytes);
  EXPECT_EQ(engine.stats().failed_requests, 1u);
}

INSTANTIATE_TEST_SUITE_P(Faults, IoEngineWriteFaultTest,
                         ::testing::Values(WriteFault{IoFault::Enospc, ENOSPC}, WriteFault{IoFault::Eio, EIO}));

TEST(IoEngineWriteTest, MalformedWritesAreRefusedAndAnEmptyOneCompletes) {
  auto counted = std::make_shared<FaultInjectingIoBackend>(std::make_shared<PosixIoBackend>(), FaultPlan{});
  SpillTarget file(counted);
  IoEngine engine({.threads = 1, .queue_depth = 1, .chunk_bytes = 4096, .mode = IoMode::Buffered}, counted);
  const char byte = 1;
  const auto refused = [&](WriteRequest request, IoCallback on_done) {
    return error_of([&] { engine.submit_write(std::move(request), std::move(on_done)); }).code();
  };
  const IoCallback ignore = [](std::exception_ptr) {};
  EXPECT_EQ(refused({.handle = -1, .offset = 0, .length = 1, .source = &byte, .name = "x"}, ignore),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(refused({.handle = file.handle, .offset = 0, .length = 1, .source = nullptr, .name = "x"}, ignore),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(refused({.handle = file.handle, .offset = ~std::uint64_t{0}, .length = 2, .source = &byte, .name = "x"},
                    ignore),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(refused({.handle = file.handle, .offset = 0, .length = 1, .source = &byte, .name = "x"}, nullptr),
            ErrorCode::InvalidArgument);
  write(engine, {.handle = file.handle, .offset = 0, .length = 0, .source = nullptr, .name = file.name()});
  EXPECT_EQ(counted->pwrite_calls(), 0);
}

TEST(IoEngineWriteTest, ACancelledWriteNamesTheFile) {
  auto counted = std::make_shared<FaultInjectingIoBackend>(std::make_shared<PosixIoBackend>(), FaultPlan{});
  SpillTarget file(counted);
  IoEngine engine({.threads = 1, .queue_depth = 1, .chunk_bytes = 4096, .mode = IoMode::Buffered}, counted);
  const auto bytes = test::random_bytes(4096, 8);
  const Error error = error_of([&] {
    write(engine, {.handle = file.handle, .offset = 0, .length = bytes.size(), .source = bytes.data(),
                   .name = file.name()},
          std::make_shared<std::atomic<bool>>(true));
  });
  EXPECT_EQ(error.code(), ErrorCode::Cancelled);
  EXPECT_TRUE(contains(error, "write of " + file.name() + " at offset 0: cancelled")) << error.what();
  EXPECT_EQ(counted->pwrite_calls(), 0);
}

}  // namespace
}  // namespace tt
