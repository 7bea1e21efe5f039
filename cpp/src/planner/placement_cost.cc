// The list-schedule latency estimate and measures, the feasibility check and the residency rule.
#include "tt/planner/placement_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tt/common/error.h"

namespace tt {
namespace {

// Byte counts are >= 0; a sum past the int64 range stays at its maximum instead of wrapping.
std::int64_t add_saturating(std::int64_t total, std::int64_t bytes) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  return total > kMax - bytes ? kMax : total + bytes;
}

}  // namespace

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
  for (double seconds_per_byte : problem.stream_s_per_byte) streams_.push_back(seconds_per_byte > 0);
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

template <bool kMeasure>
double LatencyModel::list_schedule(const std::vector<std::int32_t>& devices, const std::vector<bool>& resident,
                                   LatencyScratch& scratch, PlacementMeasures* measures) const {
  const std::size_t count = problem_.regions.size();
  const std::size_t device_count = problem_.devices.size();
  scratch.end.resize(count);
  scratch.device_free.assign(device_count, 0.0);
  std::int64_t traffic = 0;
  if constexpr (kMeasure) {
    scratch.busy.assign(device_count, 0.0);
    scratch.sent.assign(count * device_count, 0);
  }
  double makespan = 0.0;
  for (std::size_t r = 0; r < count; ++r) {
    const auto d = static_cast<std::size_t>(devices[r]);
    double start = scratch.device_free[d];
    double received = 0.0;
    for (std::size_t k = dep_offsets_[r]; k < dep_offsets_[r + 1]; ++k) {
      const auto p = static_cast<std::size_t>(dep_positions_[k]);
      const auto from = static_cast<std::size_t>(devices[p]);
      double ready = scratch.end[p];
      if (from != d) {
        const double transfer = output_bytes_[p] * transfer_s_per_byte_[from * device_count + d];
        ready += transfer;
        if constexpr (kMeasure) {
          // Every reader on d waits for the same arrival: the output moves there once.
          std::uint8_t& sent = scratch.sent[p * device_count + d];
          if (sent == 0) {
            sent = 1;
            received += transfer;
            traffic = add_saturating(traffic, problem_.regions[p].output_bytes);
          }
        }
      }
      start = std::max(start, ready);
    }
    double duration = compute_s_[r * device_count + d];
    if (!resident[r]) {
      duration += stream_s_[r * device_count + d];
      if constexpr (kMeasure) {
        if (streams_[d]) traffic = add_saturating(traffic, problem_.regions[r].param_bytes);
      }
    }
    const double end = start + duration;
    scratch.end[r] = end;
    scratch.device_free[d] = end;
    makespan = std::max(makespan, end);
    if constexpr (kMeasure) scratch.busy[d] += duration + received;
  }
  if constexpr (kMeasure) {
    measures->latency_s = makespan;
    measures->bottleneck_s = *std::max_element(scratch.busy.begin(), scratch.busy.end());
    measures->traffic_bytes = traffic;
  }
  return makespan;
}

double LatencyModel::latency(const std::vector<std::int32_t>& devices, const std::vector<bool>& resident,
                             LatencyScratch& scratch) const {
  return list_schedule<false>(devices, resident, scratch, nullptr);
}

PlacementMeasures LatencyModel::measure(const std::vector<std::int32_t>& devices, const std::vector<bool>& resident,
                                        LatencyScratch& scratch) const {
  PlacementMeasures measures;
  list_schedule<true>(devices, resident, scratch, &measures);
  return measures;
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

PlacementMeasures measure_placement(const PlacementProblem& problem, const Assignment& assignment) {
  const LatencyModel model(problem);
  check_assignment(problem, assignment);
  LatencyScratch scratch;
  return model.measure(assignment.device, assignment.resident, scratch);
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
