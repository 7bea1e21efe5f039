// Times buffered and O_DIRECT reads of one file at several thread counts and request sizes, to configure an IoEngine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tt/storage/io_engine.h"

namespace tt {

// One configuration to time.
struct ReadModeCandidate {
  IoMode mode = IoMode::Buffered;               // Buffered or Direct (Auto is allowed but says less)
  std::int32_t threads = 1;                     // I/O threads, also the queue depth
  std::uint64_t request_bytes = std::uint64_t{4} << 20;  // piece size: a positive multiple of 4096
};

// The timing of one candidate over every round.
struct ReadModeResult {
  ReadModeCandidate candidate;
  bool measured = false;               // false: the candidate could not run here (see skipped_reason)
  double gigabytes_per_second = 0;     // median over the rounds of bytes read / wall time / 1e9; 0 when not measured
  std::vector<double> samples;         // each round's GB/s, in round order
  std::string skipped_reason;          // e.g. the filesystem refusing O_DIRECT
};

// Every candidate's result, in the order given, and the fastest.
struct ReadModeMeasurement {
  std::uint64_t bytes = 0;             // bytes read per candidate and round
  std::vector<ReadModeResult> results;
  ReadModeResult best;                 // the highest median; measured == false when no candidate could run
};

// {Buffered, Direct} x threads {1, 2, 4, 8} x request sizes {1, 4, 16} MiB.
std::vector<ReadModeCandidate> default_read_mode_candidates();

// Engine options that reproduce a measured candidate (queue depth = threads).
IoEngineOptions engine_options_for(const ReadModeCandidate& candidate);

// Reads file bytes [0, min(bytes_to_read, file size) rounded down to 4096) of `path` once per
// candidate and round, each time after dropping the file's cached pages (posix_fadvise DONTNEED,
// after an fdatasync so that no page is dirty), so that buffered reads come from the device too.
// Every round times every candidate once, so that a shared disk's drift hits all of them alike,
// and each candidate is judged by its median. Blocks for the whole measurement; allocates one
// buffer of that size. Throws Error(InvalidArgument) for a bad candidate, rounds < 1 or fewer
// than 4096 bytes to read, Error(NotFound)/Error(IO) for the file.
ReadModeMeasurement measure_read_modes(const std::string& path, std::uint64_t bytes_to_read,
                                       const std::vector<ReadModeCandidate>& candidates = default_read_mode_candidates(),
                                       std::int32_t rounds = 1);

}  // namespace tt
