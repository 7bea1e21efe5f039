// The static memory plan: every buffer's offset in its tier's arena, and the orderings that make reuse safe.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "tt/ir/buffer.h"
#include "tt/ir/happens_before.h"

namespace tt {

// A buffer's life in the plan's order: from its first writer to its Free (or the end of
// the call for outputs); residents and inputs live throughout.
struct BufferInterval {
  std::size_t first_write = 0;   // position of the instruction that first writes it
  std::size_t free = 0;          // position of the Free that frees it; npos: never freed in a call
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
};

// A plain value: the plan of one program. Each tier has two spaces planned the same way:
// the arena the core allocates, and the bytes torch allocates (torch_owned buffers),
// whose offsets only serve to bound how many of them live at once.
struct MemoryPlan {
  std::vector<std::int64_t> offsets;          // per buffer (program order): offset in its space; -1: none (inputs, file ranges)
  std::vector<std::int64_t> arena_bytes;      // per tier: both spaces, the most bytes the tier ever holds
  std::vector<std::int64_t> resident_bytes;   // per tier: of which resident, held across calls (both spaces)
  std::vector<std::int64_t> owned_bytes;      // per tier: the core's arena (resident and transient)
  // per tier: its resident part, at offsets [0, this): the residents, then padding up to the
  // transients' largest alignment, where the call's arena starts
  std::vector<std::int64_t> owned_resident_bytes;
  std::vector<std::int64_t> peak_bytes;       // per tier: most bytes live at once in the plan's order
  // (earlier Free position, later writer position): dependencies added so a buffer that
  // reuses another's space is written only after that one is freed.
  std::vector<std::pair<std::size_t, std::size_t>> reuse_deps;
};

// Plans the arenas of `buffers` (intervals in `order`, positions of instructions) on
// `tiers`: residents first, from offset 0; transients placed largest first at the lowest
// aligned offset free for their whole interval. Adds a reuse dependency wherever a buffer
// shares bytes with an earlier one that is not already ordered before it.
MemoryPlan plan_memory(const std::vector<Tier>& tiers, const std::vector<Buffer>& buffers,
                       const std::vector<BufferInterval>& intervals, const std::vector<std::size_t>& rank,
                       const HappensBefore& order);

}  // namespace tt
