// Validation of a machine description and the roofline and transfer cost formulas.
#include "tt/sim/machine_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <unordered_set>

#include "tt/common/error.h"

namespace tt {
namespace {

[[noreturn]] void reject(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, "machine model: " + message);
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

// Names identify parts in reports and plans, so within one kind they must be unique.
void check_name(const std::string& kind, std::size_t index, const std::string& name,
                std::unordered_set<std::string>& seen) {
  if (name.empty()) reject(kind + " " + std::to_string(index) + " has an empty name");
  if (!seen.insert(name).second) reject("duplicate " + kind + " name '" + name + "'");
}

void check_positive(const std::string& who, const char* field, double value) {
  if (!std::isfinite(value) || value <= 0.0) {
    reject(who + " " + field + " must be a positive finite number, found " + number(value));
  }
}

void check_tier(const std::string& who, const char* field, std::int32_t tier, std::size_t tier_count) {
  if (tier < 0 || static_cast<std::size_t>(tier) >= tier_count) {
    reject(who + " " + field + " must be a tier index in [0, " + std::to_string(tier_count) + "), found " +
           std::to_string(tier));
  }
}

}  // namespace

MachineModel::MachineModel(std::vector<TierModel> tiers, std::vector<DeviceModel> devices,
                           std::vector<LinkModel> links)
    : tiers_(std::move(tiers)), devices_(std::move(devices)), links_(std::move(links)) {
  if (devices_.empty()) reject("needs at least one device, found none");

  std::unordered_set<std::string> names;
  for (std::size_t i = 0; i < tiers_.size(); ++i) {
    const TierModel& tier = tiers_[i];
    check_name("tier", i, tier.name, names);
    if (tier.capacity_bytes < 0) {
      reject("tier '" + tier.name + "' capacity_bytes must be >= 0, found " + std::to_string(tier.capacity_bytes));
    }
  }

  names.clear();
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    const DeviceModel& device = devices_[i];
    check_name("device", i, device.name, names);
    const std::string who = "device '" + device.name + "'";
    check_positive(who, "flops_per_s", device.flops_per_s);
    check_positive(who, "memory_bytes_per_s", device.memory_bytes_per_s);
    check_tier(who, "memory_tier", device.memory_tier, tiers_.size());
  }

  names.clear();
  for (std::size_t i = 0; i < links_.size(); ++i) {
    const LinkModel& link = links_[i];
    check_name("link", i, link.name, names);
    const std::string who = "link '" + link.name + "'";
    check_tier(who, "from_tier", link.from_tier, tiers_.size());
    check_tier(who, "to_tier", link.to_tier, tiers_.size());
    if (link.from_tier == link.to_tier) {
      reject(who + " must join two different tiers, found from_tier = to_tier = " + std::to_string(link.to_tier));
    }
    check_positive(who, "bytes_per_s", link.bytes_per_s);
    if (!std::isfinite(link.latency_s) || link.latency_s < 0.0) {
      reject(who + " latency_s must be a finite number >= 0, found " + number(link.latency_s));
    }
  }
}

double MachineModel::compute_seconds(std::int32_t device, double flops, double bytes_touched) const {
  if (device < 0 || static_cast<std::size_t>(device) >= devices_.size()) {
    reject("compute_seconds: device must be in [0, " + std::to_string(devices_.size()) + "), found " +
           std::to_string(device));
  }
  if (!std::isfinite(flops) || flops < 0.0 || !std::isfinite(bytes_touched) || bytes_touched < 0.0) {
    reject("compute_seconds: flops and bytes_touched must be finite numbers >= 0, found " + number(flops) +
           " and " + number(bytes_touched));
  }
  const DeviceModel& model = devices_[static_cast<std::size_t>(device)];
  return std::max(flops / model.flops_per_s, bytes_touched / model.memory_bytes_per_s);
}

double MachineModel::transfer_seconds(std::int32_t link, std::int64_t bytes) const {
  if (link < 0 || static_cast<std::size_t>(link) >= links_.size()) {
    reject("transfer_seconds: link must be in [0, " + std::to_string(links_.size()) + "), found " +
           std::to_string(link));
  }
  if (bytes < 0) reject("transfer_seconds: bytes must be >= 0, found " + std::to_string(bytes));
  const LinkModel& model = links_[static_cast<std::size_t>(link)];
  return model.latency_s + static_cast<double>(bytes) / model.bytes_per_s;
}

std::optional<std::int32_t> MachineModel::find_link(std::int32_t from_tier, std::int32_t to_tier) const noexcept {
  for (std::size_t i = 0; i < links_.size(); ++i) {
    if (links_[i].from_tier == from_tier && links_[i].to_tier == to_tier) return static_cast<std::int32_t>(i);
  }
  return std::nullopt;
}

}  // namespace tt
