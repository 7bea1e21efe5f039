// Arena offsets per tier: residents first, then transients largest first at the lowest free offset.
#include "tt/ir/memory_plan.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace tt {
namespace {

constexpr std::size_t kForever = std::numeric_limits<std::size_t>::max();

struct Placed {
  std::int64_t begin_offset;
  std::int64_t end_offset;
  std::size_t begin_rank;
  std::size_t end_rank;
  std::size_t buffer;
};

// The lowest offset >= value that is `phase` past a multiple of `alignment`.
std::int64_t align_up(std::int64_t value, std::int64_t alignment, std::int64_t phase) {
  return (value - phase + alignment - 1) / alignment * alignment + phase;
}

bool in_arena(const Buffer& buffer) {
  return buffer.lifetime != BufferLifetime::Input && buffer.file < 0 && buffer.bytes > 0;
}

// The lowest offset >= floor, aligned as `buffer` asks, where it fits between the (offset-sorted) conflicts.
std::int64_t lowest_fit(std::vector<const Placed*>& conflicts, std::int64_t floor, const Buffer& buffer) {
  std::sort(conflicts.begin(), conflicts.end(),
            [](const Placed* a, const Placed* b) { return a->begin_offset < b->begin_offset; });
  std::int64_t offset = align_up(floor, buffer.alignment, buffer.phase);
  for (const Placed* other : conflicts) {
    if (offset + buffer.bytes <= other->begin_offset) break;
    offset = std::max(offset, align_up(other->end_offset, buffer.alignment, buffer.phase));
  }
  return offset;
}

}  // namespace

namespace {

// Plans one space (the core's arena, or torch's bytes) of every tier: residents from 0,
// then transients. Fills offsets and reuse dependencies; returns per tier the residents'
// bytes, where the transients start, the space's end and the transients' (rank, +bytes at begin / -bytes after end).
struct SpaceSizes {
  std::vector<std::int64_t> resident, floor, total;  // residents' bytes; where transients start; the end
  std::vector<std::vector<std::pair<std::size_t, std::int64_t>>> events;
};

SpaceSizes plan_space(bool torch_owned, const std::vector<Tier>& tiers, const std::vector<Buffer>& buffers,
                      const std::vector<BufferInterval>& intervals, const std::vector<std::size_t>& rank,
                      const HappensBefore& order, MemoryPlan& plan) {
  SpaceSizes sizes{std::vector<std::int64_t>(tiers.size(), 0), {}, std::vector<std::int64_t>(tiers.size(), 0),
                   std::vector<std::vector<std::pair<std::size_t, std::int64_t>>>(tiers.size())};
  std::vector<std::size_t> transients;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& buffer = buffers[i];
    if (!in_arena(buffer) || buffer.torch_owned != torch_owned) continue;
    if (buffer.lifetime == BufferLifetime::Resident) {
      std::int64_t& end = sizes.resident[buffer.tier];
      plan.offsets[i] = align_up(end, buffer.alignment, buffer.phase);
      end = plan.offsets[i] + buffer.bytes;
    } else if (intervals[i].first_write != BufferInterval::npos) {
      transients.push_back(i);
    }
  }
  // The transients' space starts where the residents end, at an offset aligned for the most
  // aligned of them: the call's arena starts there on an aligned address, so each buffer's
  // address keeps its offset's alignment and phase.
  sizes.floor = sizes.resident;
  for (std::size_t i : transients) {
    std::int64_t& floor = sizes.floor[buffers[i].tier];
    floor = align_up(floor, buffers[i].alignment, 0);
  }
  // Largest first, then by position: deterministic, and big buffers get the low offsets.
  std::stable_sort(transients.begin(), transients.end(),
                   [&](std::size_t a, std::size_t b) { return buffers[a].bytes > buffers[b].bytes; });

  std::vector<std::vector<Placed>> placed(tiers.size());
  for (std::size_t i : transients) {
    const Buffer& buffer = buffers[i];
    const std::size_t begin = rank[intervals[i].first_write];
    const std::size_t end = intervals[i].free == BufferInterval::npos ? kForever : rank[intervals[i].free];
    std::vector<const Placed*> conflicts;
    for (const Placed& other : placed[buffer.tier]) {
      if (other.begin_rank <= end && begin <= other.end_rank) conflicts.push_back(&other);
    }
    const std::int64_t offset = lowest_fit(conflicts, sizes.floor[buffer.tier], buffer);
    plan.offsets[i] = offset;
    placed[buffer.tier].push_back({offset, offset + buffer.bytes, begin, end, i});
  }

  for (std::size_t tier = 0; tier < tiers.size(); ++tier) {
    std::int64_t total = sizes.floor[tier];
    auto& events = sizes.events[tier];
    for (const Placed& p : placed[tier]) {
      total = std::max(total, p.end_offset);
      const std::int64_t bytes = p.end_offset - p.begin_offset;
      events.emplace_back(2 * p.begin_rank, bytes);
      if (p.end_rank != kForever) events.emplace_back(2 * p.end_rank + 1, -bytes);
      // Sharing bytes with an earlier buffer is safe only once that buffer is freed.
      for (const Placed& q : placed[tier]) {
        const bool shares_bytes = q.begin_offset < p.end_offset && p.begin_offset < q.end_offset;
        if (!shares_bytes || q.end_rank >= p.begin_rank) continue;
        const std::size_t freed = intervals[q.buffer].free;
        const std::size_t written = intervals[p.buffer].first_write;
        if (!order.precedes(freed, written)) plan.reuse_deps.emplace_back(freed, written);
      }
    }
    sizes.total[tier] = total;
  }
  return sizes;
}

}  // namespace

MemoryPlan plan_memory(const std::vector<Tier>& tiers, const std::vector<Buffer>& buffers,
                       const std::vector<BufferInterval>& intervals, const std::vector<std::size_t>& rank,
                       const HappensBefore& order) {
  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), -1);
  const SpaceSizes owned = plan_space(false, tiers, buffers, intervals, rank, order, plan);
  const SpaceSizes torch = plan_space(true, tiers, buffers, intervals, rank, order, plan);
  for (std::size_t tier = 0; tier < tiers.size(); ++tier) {
    plan.arena_bytes.push_back(owned.total[tier] + torch.total[tier]);
    plan.resident_bytes.push_back(owned.resident[tier] + torch.resident[tier]);
    plan.owned_bytes.push_back(owned.total[tier]);
    plan.owned_resident_bytes.push_back(owned.floor[tier]);
    auto events = owned.events[tier];
    events.insert(events.end(), torch.events[tier].begin(), torch.events[tier].end());
    std::sort(events.begin(), events.end());
    std::int64_t live = 0;
    std::int64_t peak = 0;
    for (const auto& [when, bytes] : events) {
      live += bytes;
      peak = std::max(peak, live);
    }
    plan.peak_bytes.push_back(plan.resident_bytes[tier] + peak);
  }
  std::sort(plan.reuse_deps.begin(), plan.reuse_deps.end());
  plan.reuse_deps.erase(std::unique(plan.reuse_deps.begin(), plan.reuse_deps.end()), plan.reuse_deps.end());
  return plan;
}

}  // namespace tt
