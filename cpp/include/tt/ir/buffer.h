// The places a program's bytes live (tiers), the queues its instructions run on, and its buffers.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "tt/common/file_identity.h"

namespace tt {

// What kind of memory a tier is. Append new kinds so the numeric values stay stable.
enum class TierKind : std::int32_t {
  Host,    // host RAM, from the C++ host pool
  Device,  // an accelerator's memory (a virtual device's, today)
  Disk,    // file ranges: weights read in place, and the spill file
};

// One memory tier and its budget; a plain value.
struct Tier {
  std::string name;                                                // "ram", "cuda:0", "disk"
  TierKind kind = TierKind::Host;
  std::int64_t capacity_bytes = std::numeric_limits<std::int64_t>::max();  // most bytes the program may hold there
};

// What kind of resource a queue stands for. Append new kinds so the numeric values stay stable.
enum class QueueKind : std::int32_t {
  Compute,  // CPU compute slots, or a device's compute
  Io,       // the I/O engine: loads, spills, reloads
  Link,     // a copy link between two tiers
};

// A resource with its own queue: at most `capacity` of its instructions run at once.
struct Queue {
  std::string name;                    // "cpu", "io", "ram->dev0"
  QueueKind kind = QueueKind::Compute;
  std::int32_t capacity = 1;           // >= 1: compute slots, I/O depth, or 1 for a serial link
};

// How long a buffer's bytes exist. Append new kinds so the numeric values stay stable.
enum class BufferLifetime : std::int32_t {
  Resident,   // exists before every call and across calls (weights, a KV cache written in place)
  Transient,  // written first within a call and freed by a Free (or returned as an output)
  Input,      // bound to memory the caller owns, per call; never in a tier's arena
};

// Stable lowercase names, for messages.
const char* tier_kind_name(TierKind kind);
const char* queue_kind_name(QueueKind kind);
const char* buffer_lifetime_name(BufferLifetime lifetime);

// A file that Disk buffers are ranges of, with the digests of its fixed-size chunks.
struct FileSpec {
  std::string path;
  std::int64_t bytes = 0;                     // the file's size
  std::int64_t chunk_bytes = 0;               // 0: no digests
  std::vector<std::string> chunk_sha256;      // lowercase hex, one per chunk from offset 0
  // The file as it was when its ranges' CRC-32Cs were computed from it, settled: a load finding
  // it so skips the checksum pass (RangeTrust's known-good identity). Absent: none yet.
  std::optional<FileIdentity> verified_as = std::nullopt;
};

// A contiguous range of bytes in one tier; a plain value.
struct Buffer {
  std::int64_t id = 0;                        // unique within its program
  std::int32_t tier = 0;                      // index into the program's tiers
  std::int64_t bytes = 0;
  std::int64_t alignment = 64;                // a power of two; the arena offset is a multiple of it
  std::string dtype;                          // for torch: "float32", ... (empty: raw bytes)
  std::vector<std::int64_t> shape;            // for torch
  BufferLifetime lifetime = BufferLifetime::Transient;
  std::string label;                          // "h.0.attn.weight", "region 3 out 0"
  // A Resident buffer on a Disk tier is a range of a file: index into the program's files
  // and the byte offset there. A Transient Disk buffer lives in the spill file, at the
  // offset the memory plan gives it (file stays -1).
  std::int32_t file = -1;
  std::int64_t file_offset = 0;
  // The bytes are a tensor torch allocated (a kernel's output, or a model's own weight
  // used in place), not arena memory: planned and counted like any buffer, so budgets
  // hold, but never allocated by the core.
  bool torch_owned = false;
  // A file range's own CRC-32C, which every load of it checks (cheap enough for every
  // byte read); -1: only the file's chunk digests are checked.
  std::int64_t crc32c = -1;
  // The arena offset is `phase` past a multiple of `alignment` (0 <= phase < alignment): a
  // buffer a Load writes takes its file offset's phase modulo 4096, so that destination and
  // file agree modulo 4096 and the read's aligned middle goes past the page cache (O_DIRECT).
  std::int64_t phase = 0;
};

}  // namespace tt
