// glibc's malloc thresholds, set once per process and only ever raised.
#include "tt/memory/heap_retention.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "tt/common/error.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tt {
namespace {

constexpr std::int64_t kMiB = 1 << 20;
// glibc refuses an mmap threshold above HEAP_MAX_SIZE / 2 (32 MiB on 64-bit), the same
// limit its adaptive threshold stops at; its adaptive trim threshold is twice that.
constexpr std::int64_t kMmapThreshold = 32 * kMiB;
constexpr std::int64_t kMinTrim = 2 * kMmapThreshold;
constexpr std::int64_t kMaxTrim = 0x7fffffff;  // mallopt takes an int

std::mutex retention_mutex;
HeapRetention in_force;

// Whether the process set glibc's thresholds itself (its environment, read by glibc at
// start): its settings win, so they are left alone.
bool thresholds_set_by_process() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const bool tuned = tunables != nullptr && (std::strstr(tunables, "glibc.malloc.trim_threshold") != nullptr ||
                                             std::strstr(tunables, "glibc.malloc.mmap_threshold") != nullptr);
  return tuned || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr || std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr;
}

}  // namespace

HeapRetention retain_freed_heap(std::int64_t bytes) {
  if (bytes < 0) {
    throw Error(ErrorCode::InvalidArgument, "retain_freed_heap: bytes must be >= 0, got " + std::to_string(bytes));
  }
  std::lock_guard lock(retention_mutex);
#if defined(__GLIBC__)
  const std::int64_t trim = std::min(std::max({bytes, kMinTrim, in_force.trim_bytes}), kMaxTrim);
  if (trim == in_force.trim_bytes || thresholds_set_by_process()) return in_force;
  // Where glibc refuses a value (none of ours does), what it took stays and retention
  // says unsupported: this is a speed-up only.
  const bool mmap_set = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThreshold)) == 1;
  const bool trim_set = mallopt(M_TRIM_THRESHOLD, static_cast<int>(trim)) == 1;
  if (mmap_set && trim_set) in_force = HeapRetention{true, trim, kMmapThreshold};
#else
  (void)bytes;
#endif
  return in_force;
}

HeapRetention heap_retention() {
  std::lock_guard lock(retention_mutex);
  return in_force;
}

}  // namespace tt
