// What the simulator knows about a machine: memory tiers, compute devices and the links between tiers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tt {

// One place bytes can live ("cuda:0" memory, "ram", "disk"); a plain value.
struct TierModel {
  std::string name;                // unique among the tiers
  std::int64_t capacity_bytes = 0; // what fits; a plan may exceed it, the simulator reports that
};

// One compute engine; a plain value.
struct DeviceModel {
  std::string name;                 // unique among the devices
  double flops_per_s = 0.0;         // peak arithmetic rate
  double memory_bytes_per_s = 0.0;  // bandwidth to its own memory tier
  std::int32_t memory_tier = 0;     // index into the tiers: the memory it computes from (RAM for a CPU)
};

// A one-way path that moves bytes between two tiers (ram -> cuda:0, disk -> ram); a
// host-staged copy is two links. A plain value.
struct LinkModel {
  std::string name;          // unique among the links
  std::int32_t from_tier = 0;
  std::int32_t to_tier = 0;
  double bytes_per_s = 0.0;  // sustained bandwidth
  double latency_s = 0.0;    // fixed cost of every transfer, paid once per transfer
};

// The validated machine. Immutable after construction, so safe to share across threads.
class MachineModel {
 public:
  // Validates and keeps the description. Throws Error(InvalidArgument) naming the field
  // when there are no devices, a name is empty or repeats within its kind, a speed or
  // bandwidth is not a positive finite number, a latency is negative or not finite, a
  // capacity is negative, a tier index is out of range, or a link joins a tier to itself.
  MachineModel(std::vector<TierModel> tiers, std::vector<DeviceModel> devices, std::vector<LinkModel> links);

  // The parts in the order given; indices into these are what tasks and links refer to.
  const std::vector<TierModel>& tiers() const noexcept { return tiers_; }
  const std::vector<DeviceModel>& devices() const noexcept { return devices_; }
  const std::vector<LinkModel>& links() const noexcept { return links_; }

  // Roofline time of `flops` operations touching `bytes_touched` bytes on `device`:
  // whichever of arithmetic and memory traffic takes longer. Throws InvalidArgument on an
  // out-of-range device or a negative or non-finite amount.
  double compute_seconds(std::int32_t device, double flops, double bytes_touched) const;

  // latency + bytes / bandwidth of `link`. Throws InvalidArgument on an out-of-range link
  // or negative bytes.
  double transfer_seconds(std::int32_t link, std::int64_t bytes) const;

  // The lowest-index link from `from_tier` to `to_tier`, or nothing when none exists
  // (tier indices out of range also give nothing).
  std::optional<std::int32_t> find_link(std::int32_t from_tier, std::int32_t to_tier) const noexcept;

 private:
  std::vector<TierModel> tiers_;
  std::vector<DeviceModel> devices_;
  std::vector<LinkModel> links_;
};

}  // namespace tt
