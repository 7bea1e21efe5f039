// The run-time memory ledger: what each tier holds now, its peak, and a budget it never exceeds.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "tt/ir/buffer.h"

namespace tt {

// One per executing program (shared by its concurrent calls). Thread-safe: every method
// may be called from any thread.
class MemoryLedger {
 public:
  // Tracks `tiers`' capacities; nothing is held at first.
  explicit MemoryLedger(std::vector<Tier> tiers);

  // Takes `bytes` on `tier` for `what`, or throws Error(ResourceExhausted) naming the
  // tier, the bytes needed, held and allowed; a failed call holds nothing.
  void reserve(std::int32_t tier, std::int64_t bytes, const std::string& what);

  // Takes bytes[t] on every tier t at once, waiting up to timeout_s for other holders to
  // give room back. Returns false (holding nothing) on timeout; throws
  // Error(ResourceExhausted) at once if a tier could never hold its share.
  bool reserve_all(const std::vector<std::int64_t>& bytes, double timeout_s, const std::string& what);

  // Gives back bytes taken before (bytes[t] on every tier t for release_all).
  void release(std::int32_t tier, std::int64_t bytes);
  void release_all(const std::vector<std::int64_t>& bytes);

  std::int64_t held(std::int32_t tier) const;
  std::int64_t peak(std::int32_t tier) const;
  std::int64_t capacity(std::int32_t tier) const;
  std::size_t tier_count() const noexcept { return tiers_.size(); }

  // Starts each tier's peak again from what it holds now.
  void reset_peaks();

 private:
  void check_tier(std::int32_t tier) const;
  bool fits(const std::vector<std::int64_t>& bytes) const;  // caller holds mutex_

  std::vector<Tier> tiers_;
  mutable std::mutex mutex_;
  std::condition_variable room_;
  std::vector<std::int64_t> held_;
  std::vector<std::int64_t> peak_;
};

}  // namespace tt
