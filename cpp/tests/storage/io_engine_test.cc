// Tests of the I/O engine: bytes, concurrency limits, completion, faults, digests, cancellation.
#include "tt/storage/io_engine.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "io_test_support.h"
#include "tt/common/aligned_buffer.h"
#include "tt/common/crc32c.h"
#include "tt/common/file_identity.h"
#include "tt/common/error.h"
#include "tt/common/os_resources.h"
#include "tt/storage/read_modes.h"

namespace tt {
namespace {

using namespace std::chrono_literals;
using test::contains;
using test::error_of;
using test::TempDir;

// A file of random bytes in its own temporary directory.
struct TestFile {
  explicit TestFile(std::size_t size, std::uint64_t seed = 11) : bytes(test::random_bytes(size, seed)) {
    test::write_file(path(), bytes);
  }
  std::string path() const { return dir.path("data.bin"); }
  TempDir dir;
  std::vector<std::uint8_t> bytes;
};

std::shared_ptr<FileDigests> digests_of(const std::vector<std::uint8_t>& bytes, std::uint64_t chunk) {
  auto digests = std::make_shared<FileDigests>();
  digests->chunk_bytes = chunk;
  for (std::uint64_t at = 0; at < bytes.size(); at += chunk) {
    digests->chunks.push_back(sha256(bytes.data() + at, std::min<std::uint64_t>(chunk, bytes.size() - at)));
  }
  return digests;
}

struct EngineCase {
  std::int32_t threads;
  std::int32_t depth;
  std::uint64_t chunk;
  IoMode mode;
};

class IoEngineBytesTest : public ::testing::TestWithParam<EngineCase> {};

TEST_P(IoEngineBytesTest, ManyConcurrentRequestsReadTheFilesBytes) {
  const EngineCase& c = GetParam();
  TestFile file(3 << 20);
  IoEngine engine({.threads = c.threads, .queue_depth = c.depth, .chunk_bytes = c.chunk, .mode = c.mode});
  std::mt19937_64 random(c.threads * 100 + c.depth);
  constexpr int kRequests = 40;
  // One aligned buffer per request; offsets alternate between aligned (direct-eligible) and random.
  std::vector<AlignedBuffer> buffers;
  std::vector<std::promise<std::exception_ptr>> results(kRequests);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (int i = 0; i < kRequests; ++i) {
    const std::uint64_t length = i == 0 ? file.bytes.size() : 1 + random() % (600 << 10);
    std::uint64_t offset = random() % (file.bytes.size() - length + 1);
    if (i % 2 == 1) offset = offset / 4096 * 4096;
    ranges.emplace_back(offset, length);
    buffers.emplace_back(length, 4096);
    engine.submit({.path = file.path(), .offset = offset, .length = length, .destination = buffers.back().data(),
                   .digests = {}},
                  [&results, i](std::exception_ptr error) { results[i].set_value(std::move(error)); });
  }
  for (int i = 0; i < kRequests; ++i) {
    const std::exception_ptr error = results[i].get_future().get();
    ASSERT_EQ(error, nullptr) << "request " << i;
    EXPECT_EQ(0, std::memcmp(buffers[i].data(), file.bytes.data() + ranges[i].first, ranges[i].second))
        << "request " << i << " offset " << ranges[i].first << " length " << ranges[i].second;
  }
  const IoStats stats = engine.stats();
  EXPECT_EQ(stats.requests, static_cast<std::uint64_t>(kRequests));
  EXPECT_EQ(stats.failed_requests, 0u);
  if (c.mode == IoMode::Buffered) {
    EXPECT_EQ(stats.direct_bytes, 0u);
  }
  if (c.mode == IoMode::Auto && engine.direct_fallback_reason().find("refuse") == std::string::npos) {
    EXPECT_GT(stats.direct_bytes, 0u);  // the aligned requests went direct where the filesystem allows
  }
  EXPECT_GT(stats.busy_seconds, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Configurations, IoEngineBytesTest,
                         ::testing::Values(EngineCase{1, 1, 64 << 10, IoMode::Auto},
                                           EngineCase{3, 2, 100000, IoMode::Buffered},
                                           EngineCase{4, 8, 256 << 10, IoMode::Auto},
                                           EngineCase{8, 3, 1 << 20, IoMode::Auto}));

TEST(IoEngineTest, AlignedReadGoesDirectOrTheFallbackSaysWhy) {
  TestFile file(1 << 20);
  IoEngine engine({.threads = 2, .queue_depth = 2, .chunk_bytes = 256 << 10, .mode = IoMode::Auto});
  AlignedBuffer out(file.bytes.size(), 4096);
  engine.read({.path = file.path(), .offset = 0, .length = file.bytes.size(), .destination = out.data(), .digests = {}});
  EXPECT_EQ(0, std::memcmp(out.data(), file.bytes.data(), file.bytes.size()));
  if (engine.stats().direct_bytes != file.bytes.size()) {
    EXPECT_NE(engine.direct_fallback_reason(), "");
  } else {
    EXPECT_EQ(engine.direct_fallback_reason(), "");
  }
  // A destination misaligned against its offset reads through the page cache and says so.
  engine.read({.path = file.path(), .offset = 0, .length = 8192, .destination = out.data() + 1, .digests = {}});
  EXPECT_EQ(0, std::memcmp(out.data() + 1, file.bytes.data(), 8192));
  EXPECT_NE(engine.direct_fallback_reason(), "");
}

TEST(IoEngineTest, DirectModeReadsAlignedPartsDirectOrIsIncompatible) {
  TestFile file((1 << 20) + 100);
  IoEngine engine({.threads = 2, .queue_depth = 2, .chunk_bytes = 256 << 10, .mode = IoMode::Direct});
  AlignedBuffer out(file.bytes.size(), 4096);
  try {
    // Starts and ends unaligned: head and tail through the page cache, the middle direct.
    engine.read({.path = file.path(), .offset = 100, .length = file.bytes.size() - 100, .destination = out.data() + 100,
                 .digests = {}});
    EXPECT_EQ(0, std::memcmp(out.data() + 100, file.bytes.data() + 100, file.bytes.size() - 100));
    EXPECT_EQ(engine.stats().buffered_bytes, (4096u - 100) + 100);
    EXPECT_EQ(engine.stats().direct_bytes, (1u << 20) - 4096);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Incompatible) << error.what();
  }
  const Error misaligned = error_of([&] {
    engine.submit({.path = file.path(), .offset = 0, .length = 10, .destination = out.data() + 1, .digests = {}},
                  [](std::exception_ptr) { FAIL() << "called back for a rejected request"; });
  });
  EXPECT_EQ(misaligned.code(), ErrorCode::InvalidArgument);
}

TEST(IoEngineTest, RespectsTheQueueDepth) {
  TestFile file(1 << 20);
  auto backend = std::make_shared<test::BlockingBackend>();
  IoEngine engine({.threads = 6, .queue_depth = 2, .chunk_bytes = 64 << 10, .mode = IoMode::Buffered}, backend);
  std::vector<std::uint8_t> out(file.bytes.size());
  std::promise<std::exception_ptr> done;
  engine.submit({.path = file.path(), .offset = 0, .length = out.size(), .destination = out.data(), .digests = {}},
                [&](std::exception_ptr error) { done.set_value(std::move(error)); });
  backend->wait_for_concurrent(2);
  std::this_thread::sleep_for(30ms);  // time for a third pread to start, were the engine to allow one
  EXPECT_EQ(backend->max_concurrent(), 2);
  backend->gate.open();
  EXPECT_EQ(done.get_future().get(), nullptr);
  EXPECT_EQ(backend->max_concurrent(), 2);
  EXPECT_EQ(out, file.bytes);
}

TEST(IoEngineTest, CompletesOnAnIoThreadWhileTheSubmitterIsFree) {
  TestFile file(256 << 10);
  auto backend = std::make_shared<test::BlockingBackend>();
  IoEngine engine({.threads = 2, .queue_depth = 2, .chunk_bytes = 64 << 10, .mode = IoMode::Buffered}, backend);
  std::vector<std::uint8_t> out(file.bytes.size());
  std::promise<std::thread::id> called_on;
  engine.submit({.path = file.path(), .offset = 0, .length = out.size(), .destination = out.data(), .digests = {}},
                [&](std::exception_ptr) { called_on.set_value(std::this_thread::get_id()); });
  // submit() returned although no read can finish yet: the gate is closed.
  auto future = called_on.get_future();
  EXPECT_EQ(future.wait_for(20ms), std::future_status::timeout);
  backend->gate.open();
  EXPECT_NE(future.get(), std::this_thread::get_id());
  EXPECT_EQ(out, file.bytes);
}

TEST(IoEngineTest, EioAtTheNthReadNamesPathAndOffsetAndTheEngineGoesOn) {
  TestFile file(64 << 10);
  auto backend = std::make_shared<FaultInjectingIoBackend>(std::make_shared<PosixIoBackend>(),
                                                           FaultPlan{IoFault::Eio, 3, false, 0});
  IoEngine engine({.threads = 1, .queue_depth = 1, .chunk_bytes = 4096, .mode = IoMode::Buffered}, backend);
  std::vector<std::uint8_t> out(file.bytes.size());
  const Error error = error_of([&] {
    engine.read({.path = file.path(), .offset = 0, .length = out.size(), .destination = out.data(), .digests = {}});
  });
  EXPECT_EQ(error.code(), ErrorCode::IO);
  EXPECT_TRUE(contains(error, file.path())) << error.what();
  EXPECT_TRUE(contains(error, "offset 8192")) << error.what();
  EXPECT_TRUE(contains(error, std::strerror(EIO))) << error.what();
  EXPECT_EQ(backend->pread_calls(), 3);  // the remaining 13 pieces were skipped

  engine.read({.path = file.path(), .offset = 0, .length = out.size(), .destination = out.data(), .digests = {}});
  EXPECT_EQ(out, file.bytes);
  EXPECT_EQ(engine.stats().failed_requests, 1u);
}

TEST(IoEngineTest, ShortReadsAreRetriedToTheRightBytes) {
  TestFile file(300000);
  auto backend = std::make_shared<FaultInjectingIoBackend>(std::make_shared<PosixIoBackend>(),
                                                           FaultPlan{IoFault::Short, 1, true, 0});
  IoEngine engine({.threads = 3, .queue_depth = 3, .chunk_bytes = 65536, .mode = IoMode::Auto}, backend);
  AlignedBuffer out(file.bytes.size(), 4096);
  engine.read({.path = file.path(), .offset = 0, .length = file.bytes.size(), .destination = out.data(),
               .digests = digests_of(file.bytes, 65536)});
  EXPECT_EQ(0, std::memcmp(out.data(), file.bytes.data(), file.bytes.size()));
  EXPECT_GT(backend->pread_calls(), 5 * 5);  // every piece needed several reads
  EXPECT_EQ(engine.stats().chunks_verified, 5u);
}

TEST(IoEngineTest, AFileShorterThanTheRequestIsDataCorruption) {
  TestFile file(10000);
  std::vector<std::uint8_t> out(20000);
  IoEngine engine({.threads = 2, .queue_depth = 2, .chunk_bytes = 4096, .mode = IoMode::Auto});
  const Error at_open = error_of([&] {
    engine.read({.path = file.path(), .offset = 5000, .length = 6000, .destination = out.data(), .digests = {}});
  });
  EXPECT_EQ(at_open.code(), ErrorCode::DataCorruption);
  EXPECT_TRUE(contains(at_open, "file ends at byte 10000, expected at least 11000")) << at_open.what();

  // Shrinking after the size check: the read itself meets the end.
  IoEngine lied_to({.threads = 1, .queue_depth = 1, .chunk_bytes = 4096, .mode = IoMode::Buffered},
                   std::make_shared<test::LongerFileBackend>(10000));
  const Error mid_read = error_of([&] {
    lied_to.read({.path = file.path(), .offset = 0, .length = 20000, .destination = out.data(), .digests = {}});
  });
  EXPECT_EQ(mid_read.code(), ErrorCode::DataCorruption);
  EXPECT_TRUE(contains(mid_read, file.path() + "': file ends at byte 10000, expected at least 20000")) << mid_read.what();
}

TEST(IoEngineTest, ChecksWholeChunksAndNamesTheCorruptOne) {
  constexpr std::uint64_t kChunk = 64 << 10;
  TestFile file(5 * kChunk + 1234);
  const auto digests = digests_of(file.bytes, kChunk);
  IoEngine engine({.threads = 3, .queue_depth = 4, .chunk_bytes = 4096, .mode = IoMode::Auto});
  AlignedBuffer out(file.bytes.size(), 4096);
  engine.read({.path = file.path(), .offset = 0, .length = file.bytes.size(), .destination = out.data(),
               .digests = digests});
  EXPECT_EQ(engine.stats().chunks_verified, 6u);  // the short last chunk too

  std::vector<std::uint8_t> flipped = file.bytes;
  flipped[2 * kChunk + 777] ^= 0x01;
  test::write_file(file.path(), flipped);
  const Error error = error_of([&] {
    engine.read({.path = file.path(), .offset = 0, .length = file.bytes.size(), .destination = out.data(),
                 .digests = digests});
  });
  EXPECT_EQ(error.code(), ErrorCode::DataCorruption);
  EXPECT_TRUE(contains(error, file.path())) << error.what();
  EXPECT_TRUE(contains(error, "chunk 2 (file bytes 131072..196608)")) << error.what();

  // A read covering chunk 2 only in part cannot check it: documented, and the bytes are the file's.
  engine.read({.path = file.path(), .offset = 2 * kChunk + 1, .length = kChunk + 10, .destination = out.data(),
               .digests = digests});
  EXPECT_EQ(0, std::memcmp(out.data(), flipped.data() + 2 * kChunk + 1, kChunk + 10));

  // A digest list for a file of another size is corruption too.
  auto fewer = std::make_shared<FileDigests>(*digests);
  fewer->chunks.pop_back();
  const Error count = error_of([&] {
    engine.read({.path = file.path(), .offset = 0, .length = 10, .destination = out.data(), .digests = fewer});
  });
  EXPECT_EQ(count.code(), ErrorCode::DataCorruption);
  EXPECT_TRUE(contains(count, "the digest list has 5")) << count.what();
}

TEST(IoEngineTest, CancelledBeforeAndDuringARead) {
  TestFile file(256 << 10);
  auto backend = std::make_shared<FaultInjectingIoBackend>(std::make_shared<PosixIoBackend>(),
                                                           FaultPlan{IoFault::None, 1, false, 0.005});
  IoEngine engine({.threads = 1, .queue_depth = 1, .chunk_bytes = 4096, .mode = IoMode::Buffered}, backend);
  std::vector<std::uint8_t> out(file.bytes.size());
  auto cancel = std::make_shared<std::atomic<bool>>(true);
  const ReadRequest request{.path = file.path(), .offset = 0, .length = out.size(), .destination = out.data(),
                            .digests = {}};
  EXPECT_EQ(error_of([&] { engine.read(request, cancel); }).code(), ErrorCode::Cancelled);
  EXPECT_EQ(backend->pread_calls(), 0);

  cancel->store(false);
  std::promise<std::exception_ptr> done;
  engine.submit(request, [&](std::exception_ptr error) { done.set_value(std::move(error)); }, cancel);
  while (backend->pread_calls() < 3) std::this_thread::sleep_for(1ms);
  cancel->store(true);
  const Error during = error_of([&] { std::rethrow_exception(done.get_future().get()); });
  EXPECT_EQ(during.code(), ErrorCode::Cancelled);
  EXPECT_TRUE(contains(during, file.path())) << during.what();
  EXPECT_LT(backend->pread_calls(), 64);  // 64 pieces of 4096: most never started
}

TEST(IoEngineTest, DestructorCompletesEveryRequestExactlyOnce) {
  TestFile file(128 << 10);
  auto backend = std::make_shared<FaultInjectingIoBackend>(std::make_shared<PosixIoBackend>(),
                                                           FaultPlan{IoFault::None, 1, false, 0.002});
  std::vector<std::vector<std::uint8_t>> outs(10, std::vector<std::uint8_t>(file.bytes.size()));
  std::vector<std::atomic<int>> calls(10);
  std::atomic<int> cancelled{0}, succeeded{0};
  {
    IoEngine engine({.threads = 2, .queue_depth = 2, .chunk_bytes = 16 << 10, .mode = IoMode::Buffered}, backend);
    for (int i = 0; i < 10; ++i) {
      engine.submit({.path = file.path(), .offset = 0, .length = file.bytes.size(), .destination = outs[i].data(),
                     .digests = {}},
                    [&, i](std::exception_ptr error) {
                      ++calls[i];
                      if (!error) {
                        ++succeeded;
                        return;
                      }
                      try {
                        std::rethrow_exception(error);
                      } catch (const Error& e) {
                        cancelled += e.code() == ErrorCode::Cancelled && contains(e, "destroyed");
                      }
                    });
    }
    while (backend->pread_calls() < 1) std::this_thread::sleep_for(1ms);
  }
  for (int i = 0; i < 10; ++i) EXPECT_EQ(calls[i].load(), 1) << "request " << i;
  EXPECT_EQ(succeeded + cancelled, 10);
  EXPECT_GE(cancelled.load(), 1);
}

TEST(IoEngineTest, MissingFileZeroLengthAndMalformedRequests) {
  TempDir dir;
  IoEngine engine({});
  char byte = 0;
  EXPECT_EQ(error_of([&] {
              engine.read({.path = dir.path("missing"), .offset = 0, .length = 1, .destination = &byte, .digests = {}});
            }).code(),
            ErrorCode::NotFound);
  engine.read({.path = dir.path("missing"), .offset = 0, .length = 0, .destination = nullptr, .digests = {}});
  const auto rejected = [&](ReadRequest request) {
    return error_of([&] { engine.submit(std::move(request), [](std::exception_ptr) {}); }).code();
  };
  EXPECT_EQ(rejected({.path = "f", .offset = 0, .length = 1, .destination = nullptr, .digests = {}}),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(rejected({.path = "f", .offset = ~std::uint64_t{0}, .length = 2, .destination = &byte, .digests = {}}),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(rejected({.path = "f", .offset = 0, .length = 1, .destination = &byte,
                      .digests = std::make_shared<FileDigests>(FileDigests{0, {}})}),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_of([&] { engine.submit({.path = "f", .offset = 0, .length = 1, .destination = &byte, .digests = {}},
                                         nullptr); }).code(),
            ErrorCode::InvalidArgument);
}

TEST(IoEngineTest, BadOptionsAreInvalidArguments) {
  const IoEngineOptions bad[] = {
      {.threads = 0, .queue_depth = 1, .chunk_bytes = 4096, .mode = IoMode::Auto},
      {.threads = 1, .queue_depth = 0, .chunk_bytes = 4096, .mode = IoMode::Auto},
      {.threads = 1, .queue_depth = 1, .chunk_bytes = 0, .mode = IoMode::Auto},
      {.threads = 1, .queue_depth = 1, .chunk_bytes = 1000, .mode = IoMode::Direct},
  };
  for (const IoEngineOptions& options : bad) {
    EXPECT_EQ(error_of([&] { IoEngine engine(options); }).code(), ErrorCode::InvalidArgument);
  }
  EXPECT_EQ(error_of([] { IoEngine engine({}, nullptr); }).code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(io_mode_from_name("direct"), IoMode::Direct);
  EXPECT_EQ(io_mode_name(IoMode::Buffered), "buffered");
  EXPECT_EQ(error_of([] { io_mode_from_name("fast"); }).code(), ErrorCode::InvalidArgument);
}

TEST(IoReadModesTest, MeasuresEachCandidateAndPicksTheBest) {
  TestFile file((1 << 20) + 5);
  const ReadModeMeasurement measurement =
      measure_read_modes(file.path(), 10 << 20, {{IoMode::Buffered, 1, 256 << 10}, {IoMode::Direct, 2, 256 << 10}});
  EXPECT_EQ(measurement.bytes, 1u << 20);  // the file's size rounded down to 4096
  ASSERT_EQ(measurement.results.size(), 2u);
  EXPECT_TRUE(measurement.results[0].measured);
  EXPECT_GT(measurement.results[0].gigabytes_per_second, 0.0);
  if (!measurement.results[1].measured) {
    EXPECT_NE(measurement.results[1].skipped_reason, "");
  }
  EXPECT_TRUE(measurement.best.measured);
  EXPECT_EQ(engine_options_for(measurement.best.candidate).chunk_bytes, 256u << 10);
  EXPECT_EQ(default_read_mode_candidates().size(), 24u);
  EXPECT_EQ(measurement.results[0].samples.size(), 1u);
  EXPECT_EQ(error_of([&] { measure_read_modes(file.path(), 100, {}); }).code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_of([&] { measure_read_modes(file.path(), 1 << 20, {}, 0); }).code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_of([&] { measure_read_modes(file.path(), 1 << 20, {{IoMode::Direct, 1, 1000}}); }).code(),
            ErrorCode::InvalidArgument);
}

TEST(IoReadModesTest, EveryRoundTimesEveryCandidateAndTheMedianJudges) {
  TestFile file(1 << 20);
  const ReadModeMeasurement measurement =
      measure_read_modes(file.path(), 1 << 20, {{IoMode::Buffered, 1, 256 << 10}, {IoMode::Buffered, 2, 256 << 10}}, 3);
  for (const ReadModeResult& result : measurement.results) {
    ASSERT_EQ(result.samples.size(), 3u);
    std::vector<double> sorted = result.samples;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_DOUBLE_EQ(result.gigabytes_per_second, sorted[1]);
  }
  const double best = std::max(measurement.results[0].gigabytes_per_second, measurement.results[1].gigabytes_per_second);
  EXPECT_DOUBLE_EQ(measurement.best.gigabytes_per_second, best);
}

}  // namespace
}  // namespace tt

namespace tt {
namespace {

TEST(IoEngineRangeChecksumTest, ARangesOwnChecksumIsCheckedWhateverTheChunkGrid) {
  TestFile file(1 << 20);
  IoEngine engine({.threads = 2, .queue_depth = 4, .chunk_bytes = 64 << 10, .mode = IoMode::Auto});
  const std::uint64_t offset = 1000, length = 300000;  // spans several pieces, aligned to nothing
  std::vector<std::uint8_t> out(length);
  ReadRequest request{.path = file.path(), .offset = offset, .length = length, .destination = out.data(), .digests = {}};
  request.range_crc32c = crc32c(file.bytes.data() + offset, length);
  engine.read(request);  // the right checksum passes
  EXPECT_EQ(0, std::memcmp(out.data(), file.bytes.data() + offset, length));
  *request.range_crc32c ^= 1u;
  try {
    engine.read(request);
    FAIL() << "a wrong range checksum was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::DataCorruption);
    EXPECT_NE(std::string(error.what()).find("bytes [1000, 301000) fail their crc32c checksum"), std::string::npos)
        << error.what();
  }
}

// Rewrites byte `at` of `path` in place (same inode and size) until the file's identity moves
// off `before`: on a filesystem with coarse times, a write within one granule may keep them.
void rewrite_byte(const std::string& path, std::uint64_t at, std::uint8_t value, const FileIdentity& before) {
  const UniqueFd file(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  ASSERT_GE(file.get(), 0);
  do {
    ASSERT_EQ(::pwrite(file.get(), &value, 1, static_cast<off_t>(at)), 1);
    if (file_identity(path) == before) std::this_thread::sleep_for(10ms);
  } while (file_identity(path) == before);
}

// Passes calls to the POSIX backend; after the first pread, rewrites byte `at` of `path` in
// place, as another process writing the file while a read is in flight would.
class WriterDuringReadBackend final : public IoBackend {
 public:
  WriterDuringReadBackend(std::string path, std::uint64_t at, std::uint8_t value)
      : path_(std::move(path)), at_(at), value_(value) {}
  int open(const std::string& path, bool direct) override { return posix_.open(path, direct); }
  ssize_t pread(int handle, void* destination, std::size_t length, std::uint64_t offset) noexcept override {
    const ssize_t got = posix_.pread(handle, destination, length, offset);
    if (!written_.exchange(true)) rewrite_byte(path_, at_, value_, file_identity(path_));
    return got;
  }
  int open_for_spill(const std::string& directory) override { return posix_.open_for_spill(directory); }
  ssize_t pwrite(int handle, const void* source, std::size_t length, std::uint64_t offset) noexcept override {
    return posix_.pwrite(handle, source, length, offset);
  }
  int truncate(int handle) noexcept override { return posix_.truncate(handle); }
  void close(int handle) noexcept override { posix_.close(handle); }
  FileIdentity identity(int handle) override { return posix_.identity(handle); }

 private:
  PosixIoBackend posix_;
  const std::string path_;
  const std::uint64_t at_;
  const std::uint8_t value_;
  std::atomic<bool> written_{false};
};

// A read of `length` bytes at `offset` of `file`, checked against their CRC-32C, sharing `trust`.
ReadRequest trusted_read(const TestFile& file, std::uint64_t offset, std::vector<std::uint8_t>& out,
                         std::shared_ptr<RangeTrust> trust) {
  ReadRequest request{.path = file.path(), .offset = offset, .length = out.size(), .destination = out.data(),
                      .digests = {}};
  request.range_crc32c = crc32c(file.bytes.data() + offset, out.size());
  request.trust = std::move(trust);
  return request;
}

TEST(IoEngineRangeChecksumTest, BytesFoundGoodAreTrustedUntilTheFileChanges) {
  TestFile file(1 << 20);
  IoEngine engine({.threads = 2, .queue_depth = 4, .chunk_bytes = 64 << 10, .mode = IoMode::Auto});
  std::vector<std::uint8_t> out(200000);
  const std::uint64_t offset = 4096;
  // Settled at once (a file older than the filesystem's time granularity, as most are).
  const ReadRequest request = trusted_read(file, offset, out, std::make_shared<RangeTrust>(std::nullopt, 0));
  engine.read(request);
  EXPECT_EQ(engine.stats().ranges_checksummed, 1u) << "nothing vouched for the file yet";
  engine.read(request);
  EXPECT_EQ(0, std::memcmp(out.data(), file.bytes.data() + offset, out.size()));
  EXPECT_EQ(engine.stats().ranges_checksummed, 1u) << "found good in this very file: no pass over its bytes";

  rewrite_byte(file.path(), offset + 100, file.bytes[offset + 100] ^ 0xFF, file_identity(file.path()));
  const Error error = error_of([&] { engine.read(request); });
  EXPECT_EQ(error.code(), ErrorCode::DataCorruption);
  EXPECT_TRUE(contains(error, "fail their crc32c checksum")) << error.what();
  EXPECT_EQ(engine.stats().ranges_checksummed, 2u);

  // Good bytes again, under another identity: checked once, then trusted again.
  rewrite_byte(file.path(), offset + 100, file.bytes[offset + 100], file_identity(file.path()));
  engine.read(request);
  engine.read(request);
  EXPECT_EQ(engine.stats().ranges_checksummed, 3u);
}

TEST(IoEngineRangeChecksumTest, GoodBytesOfAFileWrittenDuringTheReadAreNotTrusted) {
  TestFile file(1 << 20);
  auto backend = std::make_shared<WriterDuringReadBackend>(file.path(), 100, file.bytes[100] ^ 0xFF);
  IoEngine engine({.threads = 1, .queue_depth = 1, .chunk_bytes = 64 << 10, .mode = IoMode::Buffered}, backend);
  std::vector<std::uint8_t> out(8192);
  const ReadRequest request = trusted_read(file, 0, out, std::make_shared<RangeTrust>(std::nullopt, 0));
  engine.read(request);  // its bytes were read before the write landed: good, but not the file's now
  EXPECT_EQ(0, std::memcmp(out.data(), file.bytes.data(), out.size()));
  const Error error = error_of([&] { engine.read(request); });
  EXPECT_EQ(error.code(), ErrorCode::DataCorruption) << "the file written during the first read was trusted";
  EXPECT_EQ(engine.stats().ranges_checksummed, 2u);
}

TEST(IoEngineRangeChecksumTest, AJustChangedFileIsCheckedOnEveryRead) {
  TestFile file(1 << 20);  // written now: within kSettledNanoseconds of its last change
  IoEngine engine({.threads = 1, .queue_depth = 1, .chunk_bytes = 64 << 10, .mode = IoMode::Auto});
  std::vector<std::uint8_t> out(8192);
  const ReadRequest request = trusted_read(file, 0, out, std::make_shared<RangeTrust>());
  engine.read(request);
  engine.read(request);
  EXPECT_EQ(engine.stats().ranges_checksummed, 2u);
}

TEST(IoEngineRangeChecksumTest, AnIdentityTheCallerVouchesForIsTrustedAndNoOther) {
  TestFile file(1 << 20);
  IoEngine engine({.threads = 1, .queue_depth = 1, .chunk_bytes = 64 << 10, .mode = IoMode::Auto});
  std::vector<std::uint8_t> out(8192);
  engine.read(trusted_read(file, 0, out, std::make_shared<RangeTrust>(file_identity(file.path()))));
  EXPECT_EQ(engine.stats().ranges_checksummed, 0u);
  FileIdentity other = file_identity(file.path());
  other.inode += 1;  // another file, as a rename over the path would leave
  engine.read(trusted_read(file, 0, out, std::make_shared<RangeTrust>(other)));
  EXPECT_EQ(engine.stats().ranges_checksummed, 1u);
}

}  // namespace
}  // namespace tt
