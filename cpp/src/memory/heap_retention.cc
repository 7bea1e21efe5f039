// glibc's malloc thresholds, set once per process and only ever raised.
#include "tt/memory/heap_retention.h"

#include <algorithm>
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

std::mutex retention_mutex;
HeapRetention in_force;

}  // namespace

HeapRetention retain_freed_heap(std::int64_t bytes) {
  if (bytes < 0) {
    throw Error(ErrorCode::InvalidArgument, "retain_freed_heap: bytes must be >= 0, got " + std::to_string(bytes));
  }
  std::lock_guard lock(retention_mutex);
#if defined(__GLIBC__)
  const std::int64_t trim = std::max({bytes, kMinTrim, in_force.trim_bytes});
  if (trim == in_force.trim_bytes) return in_force;
  // mallopt takes an int: beyond it, keep the largest it takes. Where it refuses a value
  // (no glibc of ours does), the adaptive thresholds simply stay: this is a speed-up only.
  const int trim_arg = static_cast<int>(std::min<std::int64_t>(trim, 0x7fffffff));
  if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThreshold)) == 1 && mallopt(M_TRIM_THRESHOLD, trim_arg) == 1) {
    in_force = HeapRetention{true, trim_arg, kMmapThreshold};
  }
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
