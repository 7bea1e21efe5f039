// Host memory the C++ core owns: page-aligned arenas, allocated once and reused across calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "tt/common/aligned_buffer.h"
#include "tt/memory/reuse_pool.h"

namespace tt {

// One aligned allocation. Owns its bytes; not copyable. Thread-safe to read and write
// from several threads as long as they touch different bytes.
class HostArena {
 public:
  // Allocates `bytes` (zeroed, every page faulted in) aligned to `alignment` (a power of
  // two, >= 64; 4096 suits O_DIRECT and pinning); large arenas get huge pages where the
  // kernel grants them (see AlignedBuffer). Throws Error(InvalidArgument) for bad arguments and
  // Error(ResourceExhausted) when the allocation fails.
  HostArena(std::int64_t bytes, std::int64_t alignment = 4096);
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  std::byte* data() noexcept { return buffer_ ? reinterpret_cast<std::byte*>(buffer_->data()) : nullptr; }
  const std::byte* data() const noexcept { return buffer_ ? reinterpret_cast<std::byte*>(buffer_->data()) : nullptr; }
  std::int64_t size() const noexcept { return bytes_; }
  std::int64_t alignment() const noexcept { return alignment_; }
  bool huge_page_aligned() const noexcept { return buffer_ && buffer_->huge_page_aligned(); }

 private:
  std::optional<AlignedBuffer> buffer_;  // none when empty
  std::int64_t bytes_ = 0;
  std::int64_t alignment_ = 0;
};

// Arenas of one size, kept for reuse: a call takes one and gives it back when its last
// handle drops, so steady-state calls allocate nothing. Thread-safe. Handles may outlive
// the pool (their arena is then simply freed).
class HostArenaPool {
 public:
  HostArenaPool(std::int64_t arena_bytes, std::int64_t alignment = 4096);

  // An arena from the pool, or a new one when every pooled arena is in use.
  std::shared_ptr<HostArena> acquire();

  std::int64_t arena_bytes() const noexcept { return arena_bytes_; }
  // Arenas allocated so far (in use or pooled).
  std::size_t allocated() const { return pool_.created(); }

 private:
  std::int64_t arena_bytes_;
  std::int64_t alignment_;
  ReusePool<HostArena> pool_;
};

}  // namespace tt
