// The read-mode measurement: one IoEngine per candidate over the same cold range of a file.
#include "tt/storage/read_modes.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "tt/common/aligned_buffer.h"
#include "tt/common/error.h"
#include "tt/common/os_resources.h"

namespace tt {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

void check(const ReadModeCandidate& candidate) {
  if (candidate.threads < 1 || candidate.request_bytes < kDirectAlignment ||
      candidate.request_bytes % kDirectAlignment != 0) {
    throw Error(ErrorCode::InvalidArgument, "measure_read_modes: a candidate needs threads >= 1 and request_bytes a "
                                            "positive multiple of 4096, found threads " +
                                                std::to_string(candidate.threads) + ", request_bytes " +
                                                std::to_string(candidate.request_bytes));
  }
}

double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const std::size_t middle = samples.size() / 2;
  return samples.size() % 2 == 1 ? samples[middle] : (samples[middle - 1] + samples[middle]) / 2;
}

}  // namespace

std::vector<ReadModeCandidate> default_read_mode_candidates() {
  std::vector<ReadModeCandidate> candidates;
  for (IoMode mode : {IoMode::Buffered, IoMode::Direct}) {
    for (std::int32_t threads : {1, 2, 4, 8}) {
      for (std::uint64_t mib : {1, 4, 16}) candidates.push_back({mode, threads, mib * kMiB});
    }
  }
  return candidates;
}

IoEngineOptions engine_options_for(const ReadModeCandidate& candidate) {
  IoEngineOptions options;
  options.threads = candidate.threads;
  options.queue_depth = candidate.threads;  // a synchronous pread per thread: more depth would idle
  options.chunk_bytes = candidate.request_bytes;
  options.mode = candidate.mode;
  return options;
}

ReadModeMeasurement measure_read_modes(const std::string& path, std::uint64_t bytes_to_read,
                                       const std::vector<ReadModeCandidate>& candidates, std::int32_t rounds) {
  for (const ReadModeCandidate& candidate : candidates) check(candidate);
  if (rounds < 1) {
    throw Error(ErrorCode::InvalidArgument, "measure_read_modes: rounds must be >= 1, found " + std::to_string(rounds));
  }
  PosixIoBackend posix;
  const UniqueFd file(posix.open(path, false));
  ReadModeMeasurement measurement;
  measurement.bytes = std::min(bytes_to_read, posix.identity(file.get()).size) / kDirectAlignment * kDirectAlignment;
  if (measurement.bytes == 0) {
    throw Error(ErrorCode::InvalidArgument, "measure_read_modes '" + path + "': needs at least 4096 bytes to read, "
                                            "asked for " + std::to_string(bytes_to_read));
  }
  // DONTNEED drops clean pages only: write back any dirty ones first.
  if (::fdatasync(file.get()) != 0) throw_os_error("fdatasync", path, errno);
  const AlignedBuffer buffer(static_cast<std::size_t>(measurement.bytes), kDirectAlignment);
  for (const ReadModeCandidate& candidate : candidates) {
    ReadModeResult result;
    result.candidate = candidate;
    measurement.results.push_back(std::move(result));
  }

  for (std::int32_t round = 0; round < rounds; ++round) {
    for (ReadModeResult& result : measurement.results) {
      if (!result.skipped_reason.empty()) continue;
      IoEngine engine(engine_options_for(result.candidate));  // threads start outside the timed part
      if (const int error = ::posix_fadvise(file.get(), 0, 0, POSIX_FADV_DONTNEED); error != 0) {
        throw_os_error("posix_fadvise DONTNEED", path, error);
      }
      const auto start = std::chrono::steady_clock::now();
      try {
        engine.read({.path = path, .offset = 0, .length = measurement.bytes, .destination = buffer.data(), .digests = {}});
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        result.samples.push_back(static_cast<double>(measurement.bytes) / 1e9 / std::max(seconds, 1e-9));
      } catch (const Error& error) {
        if (error.code() != ErrorCode::Incompatible) throw;
        result.skipped_reason = error.what();
      }
    }
  }
  for (ReadModeResult& result : measurement.results) {
    result.measured = result.skipped_reason.empty();
    if (!result.measured) continue;
    result.gigabytes_per_second = median(result.samples);
    if (!measurement.best.measured || result.gigabytes_per_second > measurement.best.gigabytes_per_second) {
      measurement.best = result;
    }
  }
  return measurement;
}

}  // namespace tt
