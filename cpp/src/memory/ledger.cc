// Budget enforcement per tier, with peaks and waiting for room.
#include "tt/memory/ledger.h"

#include <algorithm>
#include <chrono>

#include "tt/common/error.h"

namespace tt {

MemoryLedger::MemoryLedger(std::vector<Tier> tiers)
    : tiers_(std::move(tiers)), held_(tiers_.size(), 0), peak_(tiers_.size(), 0) {}

void MemoryLedger::check_tier(std::int32_t tier) const {
  if (tier < 0 || tier >= static_cast<std::int32_t>(tiers_.size())) {
    throw Error(ErrorCode::InvalidArgument, "memory ledger: unknown tier " + std::to_string(tier) + " (it has " +
                                                std::to_string(tiers_.size()) + ")");
  }
}

void MemoryLedger::reserve(std::int32_t tier, std::int64_t bytes, const std::string& what) {
  check_tier(tier);
  if (bytes < 0) throw Error(ErrorCode::InvalidArgument, "memory ledger: " + what + ": negative bytes");
  std::lock_guard lock(mutex_);
  if (bytes > tiers_[tier].capacity_bytes - held_[tier]) {
    throw Error(ErrorCode::ResourceExhausted, "tier '" + tiers_[tier].name + "': " + what + " needs " +
                                                  std::to_string(bytes) + " bytes but " + std::to_string(held_[tier]) +
                                                  " of its " + std::to_string(tiers_[tier].capacity_bytes) +
                                                  " allowed bytes are held");
  }
  held_[tier] += bytes;
  peak_[tier] = std::max(peak_[tier], held_[tier]);
}

bool MemoryLedger::fits(const std::vector<std::int64_t>& bytes) const {
  for (std::size_t t = 0; t < tiers_.size(); ++t) {
    if (bytes[t] > tiers_[t].capacity_bytes - held_[t]) return false;
  }
  return true;
}

bool MemoryLedger::reserve_all(const std::vector<std::int64_t>& bytes, double timeout_s, const std::string& what) {
  if (bytes.size() != tiers_.size()) {
    throw Error(ErrorCode::InvalidArgument, "memory ledger: " + what + ": expected bytes for " +
                                                std::to_string(tiers_.size()) + " tiers, got " +
                                                std::to_string(bytes.size()));
  }
  for (std::size_t t = 0; t < tiers_.size(); ++t) {
    if (bytes[t] < 0) throw Error(ErrorCode::InvalidArgument, "memory ledger: " + what + ": negative bytes");
    if (bytes[t] > tiers_[t].capacity_bytes) {
      throw Error(ErrorCode::ResourceExhausted, "tier '" + tiers_[t].name + "': " + what + " needs " +
                                                    std::to_string(bytes[t]) + " bytes but the tier allows " +
                                                    std::to_string(tiers_[t].capacity_bytes));
    }
  }
  std::unique_lock lock(mutex_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  if (!room_.wait_until(lock, deadline, [&] { return fits(bytes); })) return false;
  for (std::size_t t = 0; t < tiers_.size(); ++t) {
    held_[t] += bytes[t];
    peak_[t] = std::max(peak_[t], held_[t]);
  }
  return true;
}

void MemoryLedger::release(std::int32_t tier, std::int64_t bytes) {
  check_tier(tier);
  {
    std::lock_guard lock(mutex_);
    if (bytes < 0 || bytes > held_[tier]) {
      throw Error(ErrorCode::Internal, "memory ledger: tier '" + tiers_[tier].name + "': releasing " +
                                           std::to_string(bytes) + " bytes but " + std::to_string(held_[tier]) +
                                           " are held");
    }
    held_[tier] -= bytes;
  }
  room_.notify_all();
}

void MemoryLedger::release_all(const std::vector<std::int64_t>& bytes) {
  for (std::size_t t = 0; t < bytes.size(); ++t) release(static_cast<std::int32_t>(t), bytes[t]);
}

std::int64_t MemoryLedger::held(std::int32_t tier) const {
  check_tier(tier);
  std::lock_guard lock(mutex_);
  return held_[tier];
}

std::int64_t MemoryLedger::peak(std::int32_t tier) const {
  check_tier(tier);
  std::lock_guard lock(mutex_);
  return peak_[tier];
}

std::int64_t MemoryLedger::capacity(std::int32_t tier) const {
  check_tier(tier);
  return tiers_[tier].capacity_bytes;
}

void MemoryLedger::reset_peaks() {
  std::lock_guard lock(mutex_);
  peak_ = held_;
}

}  // namespace tt
