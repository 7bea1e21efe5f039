// Aligned host allocations and their reuse pool.
#include "tt/memory/host_arena.h"

#include <cstdlib>
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
  // aligned_alloc wants a size that is a multiple of the alignment.
  const std::size_t rounded = static_cast<std::size_t>((bytes + alignment - 1) / alignment * alignment);
  data_ = static_cast<std::byte*>(std::aligned_alloc(static_cast<std::size_t>(alignment), rounded));
  if (data_ == nullptr) {
    throw Error(ErrorCode::ResourceExhausted, "host arena: cannot allocate " + std::to_string(bytes) + " bytes");
  }
  std::memset(data_, 0, rounded);
}

HostArena::~HostArena() { std::free(data_); }

HostArenaPool::HostArenaPool(std::int64_t arena_bytes, std::int64_t alignment)
    : arena_bytes_(arena_bytes), alignment_(alignment) {
  HostArena check(0, alignment);  // validates the arguments now, not at the first call
  if (arena_bytes < 0) throw Error(ErrorCode::InvalidArgument, "host arena pool: arena_bytes must be >= 0");
}

std::shared_ptr<HostArena> HostArenaPool::acquire() {
  return pool_.acquire([this] { return std::make_unique<HostArena>(arena_bytes_, alignment_); });
}

}  // namespace tt
