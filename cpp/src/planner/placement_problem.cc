// Validation and indexing of a placement problem, so the cost model can trust positions.
#include "tt/planner/placement_problem.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "tt/common/error.h"

namespace tt {
namespace {

[[noreturn]] void reject(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, "placement problem: " + message);
}

std::string number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::string text = std::to_string(value);
  return text;
}

void check_devices(const PlacementProblem& problem) {
  const std::size_t count = problem.devices.size();
  if (count == 0) reject("expected at least one device, got 0");
  std::unordered_set<std::string> names;
  for (std::size_t d = 0; d < count; ++d) {
    const PlacementDevice& device = problem.devices[d];
    if (device.name.empty()) reject("device " + std::to_string(d) + " has an empty name");
    if (!names.insert(device.name).second) reject("device name '" + device.name + "' is used twice");
    if (device.capacity_bytes < 0) {
      reject("device '" + device.name + "' capacity_bytes must be >= 0, got " + std::to_string(device.capacity_bytes));
    }
  }
  // Transfer and stream costs must be finite: a zero byte count times +inf would be NaN.
  if (problem.transfer_s_per_byte.size() != count) {
    reject("transfer_s_per_byte must have " + std::to_string(count) + " rows (one per device), got " +
           std::to_string(problem.transfer_s_per_byte.size()));
  }
  for (std::size_t from = 0; from < count; ++from) {
    const std::vector<double>& row = problem.transfer_s_per_byte[from];
    if (row.size() != count) {
      reject("transfer_s_per_byte row " + std::to_string(from) + " must have " + std::to_string(count) +
             " entries, got " + std::to_string(row.size()));
    }
    for (std::size_t to = 0; to < count; ++to) {
      const double cost = row[to];
      const std::string where = "transfer_s_per_byte[" + std::to_string(from) + "][" + std::to_string(to) + "]";
      if (!std::isfinite(cost) || cost < 0) reject(where + " must be finite and >= 0, got " + number(cost));
      if (from == to && cost != 0) reject(where + " is on the diagonal and must be 0, got " + number(cost));
    }
  }
  if (problem.stream_s_per_byte.size() != count) {
    reject("stream_s_per_byte must have " + std::to_string(count) + " entries (one per device), got " +
           std::to_string(problem.stream_s_per_byte.size()));
  }
  for (std::size_t d = 0; d < count; ++d) {
    const double cost = problem.stream_s_per_byte[d];
    if (!std::isfinite(cost) || cost < 0) {
      reject("stream_s_per_byte for device '" + problem.devices[d].name + "' must be finite and >= 0, got " +
             number(cost));
    }
  }
}

}  // namespace

ProblemIndex index_problem(const PlacementProblem& problem) {
  check_devices(problem);
  const std::size_t device_count = problem.devices.size();
  const std::size_t count = problem.regions.size();
  if (count > static_cast<std::size_t>(INT32_MAX)) reject("too many regions: " + std::to_string(count));

  ProblemIndex index;
  index.deps.resize(count);
  std::unordered_map<std::int64_t, std::int32_t> position_of;
  for (std::size_t r = 0; r < count; ++r) {
    const PlacementRegion& region = problem.regions[r];
    const std::string who = "region " + std::to_string(region.id);
    if (region.compute_s.size() != device_count) {
      reject(who + " compute_s must have " + std::to_string(device_count) + " entries (one per device), got " +
             std::to_string(region.compute_s.size()));
    }
    for (std::size_t d = 0; d < device_count; ++d) {
      const double seconds = region.compute_s[d];
      if (std::isnan(seconds) || seconds < 0) {
        reject(who + " compute_s on device '" + problem.devices[d].name + "' must be >= 0 or +inf, got " +
               number(seconds));
      }
    }
    if (region.param_bytes < 0) reject(who + " param_bytes must be >= 0, got " + std::to_string(region.param_bytes));
    if (region.output_bytes < 0) {
      reject(who + " output_bytes must be >= 0, got " + std::to_string(region.output_bytes));
    }
    // Earlier regions only are in the map, so a dependency found there points backwards.
    std::unordered_set<std::int64_t> seen;
    for (std::int64_t dep : region.deps) {
      if (dep == region.id) reject(who + " depends on itself");
      if (!seen.insert(dep).second) reject(who + " depends on region " + std::to_string(dep) + " twice");
      const auto found = position_of.find(dep);
      if (found == position_of.end()) {
        const bool later = std::any_of(problem.regions.begin() + static_cast<std::ptrdiff_t>(r) + 1,
                                       problem.regions.end(),
                                       [dep](const PlacementRegion& other) { return other.id == dep; });
        reject(who + " depends on region " + std::to_string(dep) +
               (later ? ", which is listed after it (regions must be in topological order)"
                      : ", which does not exist"));
      }
      index.deps[r].push_back(found->second);
    }
    if (!position_of.emplace(region.id, static_cast<std::int32_t>(r)).second) {
      reject("duplicate region id " + std::to_string(region.id));
    }
  }

  index.residency_order.resize(count);
  std::iota(index.residency_order.begin(), index.residency_order.end(), 0);
  std::stable_sort(index.residency_order.begin(), index.residency_order.end(),
                   [&problem](std::int32_t a, std::int32_t b) {
                     return problem.regions[static_cast<std::size_t>(a)].param_bytes >
                            problem.regions[static_cast<std::size_t>(b)].param_bytes;
                   });
  return index;
}

void check_assignment(const PlacementProblem& problem, const Assignment& assignment) {
  const std::size_t count = problem.regions.size();
  if (assignment.device.size() != count || assignment.resident.size() != count) {
    throw Error(ErrorCode::InvalidArgument,
                "assignment: expected " + std::to_string(count) +
                    " devices and residency flags (one per region), got " + std::to_string(assignment.device.size()) +
                    " and " + std::to_string(assignment.resident.size()));
  }
  const auto device_count = static_cast<std::int32_t>(problem.devices.size());
  for (std::size_t r = 0; r < count; ++r) {
    const std::int32_t device = assignment.device[r];
    if (device < 0 || device >= device_count) {
      throw Error(ErrorCode::InvalidArgument, "assignment: region " + std::to_string(problem.regions[r].id) +
                                                  " device must be in [0, " + std::to_string(device_count) +
                                                  "), got " + std::to_string(device));
    }
  }
}

}  // namespace tt
