// Aligned host allocations and their reuse pool.
#include "tt/memory/host_arena.h"

#include <cstring>
#include <string>

#include "tt/common/error.h"

namespace tt {

HostArena::HostArena(std::int64_t bytes, std::int64_t alignment) : bytes_(bytes), alignment_(alignment) {
  if (bytes < 0 || alignment < 64 || (alignment & (alignment - 1)) != 0) {
    throw Error(ErrorCode::InvalidArgument, "host arena: expected bytes >= 0 and a power-of-two alignment >= 64, got " +
                                                std::to_string(bytes) + " and " + std::to_string(alignment));
  }
  if (bytes == 0) return;
  buffer_.emplace(static_cast<std::size_t>(bytes), static_cast<std::size_t>(alignment));
  // Faults every page in now (as huge pages where the kernel grants them), not during a call.
  std::memset(buffer_->data(), 0, buffer_->size());
}

HostArenaPool::HostArenaPool(std::int64_t arena_bytes, std::int64_t alignment)
    : arena_bytes_(arena_bytes), alignment_(alignment) {
  HostArena check(0, alignment);  // validates the arguments now, not at the first call
  if (arena_bytes < 0) throw Error(ErrorCode::InvalidArgument, "host arena pool: arena_bytes must be >= 0");
}

std::shared_ptr<HostArena> HostArenaPool::acquire() {
  return pool_.acquire([this] { return std::make_unique<HostArena>(arena_bytes_, alignment_); });
}

}  // namespace tt
