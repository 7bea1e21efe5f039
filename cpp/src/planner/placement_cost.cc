// The list-schedule latency estimate, the feasibility check and the residency rule.
#include "tt/planner/placement_cost.h"

#include <algorithm>
#include <cmath>

#include "tt/common/error.h"

namespace tt {

LatencyModel::LatencyModel(const PlacementProblem& problem) : problem_(problem) {
  ProblemIndex index = index_problem(problem);
  residency_order_ = std::move(index.residency_order);
  const std::size_t devices = problem.devices.size();
  dep_offsets_.push_back(0);
  for (std::size_t r = 0; r < problem.regions.size(); ++r) {
    const PlacementRegion& region = problem.regions[r];
    dep_positions_.insert(dep_positions_.end(), index.deps[r].begin(), index.deps[r].end());
    dep_offsets_.push_back(dep_positions_.size());
    for (std::size_t d = 0; d < devices; ++d) {
      compute_s_.push_back(region.compute_s[d]);
      stream_s_.push_back(static_cast<double>(region.param_bytes) * problem.stream_s_per_byte[d]);
    }
    output_bytes_.push_back(static_cast<double>(region.output_bytes));
  }
  for (const std::vector<double>& row : problem.transfer_s_per_byte) {
    transfer_s_per_byte_.insert(transfer_s_per_byte_.end(), row.begin(), row.end());
  }
}

void LatencyModel::assign_residency(const std::vector<std::int32_t>& devices, std::vector<bool>& resident) const {
  resident.assign(problem_.regions.size(), false);
  std::vector<std::int64_t> room(problem_.devices.size());
  for (std::size_t d = 0; d < room.size(); ++d) room[d] = problem_.devices[d].capacity_bytes;
  // On one device the stream rate is common to all its regions, so "most costly to stream"
  // is "most bytes": one global order by bytes serves every device. Comparing against the
  // room left (never summing) cannot overflow.
  for (std::int32_t position : residency_order_) {
    const auto r = static_cast<std::size_t>(position);
    const auto d = static_cast<std::size_t>(devices[r]);
    const std::int64_t bytes = problem_.regions[r].param_bytes;
    if (bytes <= room[d]) {
      room[d] -= bytes;
      resident[r] = true;
    }
  }
}

double LatencyModel::latency(const std::vector<std::int32_t>& devices, const std::vector<bool>& resident,
                             LatencyScratch& scratch) const {
  const std::size_t count = problem_.regions.size();
  const std::size_t device_count = problem_.devices.size();
  scratch.end.resize(count);
  scratch.device_free.assign(device_count, 0.0);
  double makespan = 0.0;
  for (std::size_t r = 0; r < count; ++r) {
    const auto d = static_cast<std::size_t>(devices[r]);
    double start = scratch.device_free[d];
    for (std::size_t k = dep_offsets_[r]; k < dep_offsets_[r + 1]; ++k) {
      const auto p = static_cast<std::size_t>(dep_positions_[k]);
      const auto from = static_cast<std::size_t>(devices[p]);
      double ready = scratch.end[p];
      if (from != d) ready += output_bytes_[p] * transfer_s_per_byte_[from * device_count + d];
      start = std::max(start, ready);
    }
    double duration = compute_s_[r * device_count + d];
    if (!resident[r]) duration += stream_s_[r * device_count + d];
    const double end = start + duration;
    scratch.end[r] = end;
    scratch.device_free[d] = end;
    makespan = std::max(makespan, end);
  }
  return makespan;
}

bool LatencyModel::feasible(const std::vector<std::int32_t>& devices, const std::vector<bool>& resident) const {
  std::vector<std::int64_t> room(problem_.devices.size());
  for (std::size_t d = 0; d < room.size(); ++d) room[d] = problem_.devices[d].capacity_bytes;
  for (std::size_t r = 0; r < problem_.regions.size(); ++r) {
    const auto d = static_cast<std::size_t>(devices[r]);
    if (std::isinf(problem_.regions[r].compute_s[d])) return false;
    if (!resident[r]) continue;
    const std::int64_t bytes = problem_.regions[r].param_bytes;
    if (bytes > room[d]) return false;
    room[d] -= bytes;
  }
  return true;
}

double evaluate_latency(const PlacementProblem& problem, const Assignment& assignment) {
  const LatencyModel model(problem);
  check_assignment(problem, assignment);
  LatencyScratch scratch;
  return model.latency(assignment.device, assignment.resident, scratch);
}

bool feasible(const PlacementProblem& problem, const Assignment& assignment) {
  const LatencyModel model(problem);
  check_assignment(problem, assignment);
  return model.feasible(assignment.device, assignment.resident);
}

Assignment assign_residency(const PlacementProblem& problem, const std::vector<std::int32_t>& devices) {
  const LatencyModel model(problem);
  Assignment assignment;
  assignment.device = devices;
  // Checked with placeholder flags so the size message names the device list.
  assignment.resident.assign(problem.regions.size(), false);
  if (devices.size() != problem.regions.size()) {
    throw Error(ErrorCode::InvalidArgument, "assign_residency: expected " + std::to_string(problem.regions.size()) +
                                                " devices (one per region), got " + std::to_string(devices.size()));
  }
  check_assignment(problem, assignment);
  model.assign_residency(assignment.device, assignment.resident);
  return assignment;
}

}  // namespace tt
