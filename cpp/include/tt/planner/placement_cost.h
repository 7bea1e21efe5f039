// The default cost model of a placement: a list-schedule latency estimate and the residency rule.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "tt/planner/placement_problem.h"

namespace tt {

// Rates a complete, feasible assignment in seconds (lower is better). The search may call it
// from several threads at once; +inf or NaN means "do not pick this".
using Evaluator = std::function<double(const Assignment& assignment)>;

// Per-thread buffers of LatencyModel::latency and measure, reused across calls to avoid allocation.
struct LatencyScratch {
  std::vector<double> end;          // per region: when it finishes
  std::vector<double> device_free;  // per device: when its last region finishes
  std::vector<double> busy;         // measure(): per device, seconds of work per call
  std::vector<std::uint8_t> sent;   // measure(): [region * devices + device], its output already counted there
};

// What one call of a placement costs, by the list-schedule model. A plain value.
struct PlacementMeasures {
  double latency_s = 0.0;           // the makespan (LatencyModel::latency)
  // The busiest device's seconds of work per call: its regions' compute, their streaming
  // when not resident, and the inputs it receives from other devices (each region's output
  // once per receiving device). Bounds the throughput of calls pipelined across devices.
  double bottleneck_s = 0.0;
  // Bytes moved per call: parameters streamed (not resident, on a device whose stream cost
  // is > 0), plus each region's output once per other device that reads it.
  std::int64_t traffic_bytes = 0;
};

// A validated, indexed problem that evaluates many assignments cheaply. Immutable after
// construction, hence safe to share across threads; keeps a reference to `problem`, which
// must outlive it.
class LatencyModel {
 public:
  // Throws Error(InvalidArgument) as index_problem does.
  explicit LatencyModel(const PlacementProblem& problem);

  // The problem this model evaluates.
  const PlacementProblem& problem() const noexcept { return problem_; }

  // Positions of the dependencies of the region at `position`.
  std::span<const std::int32_t> deps(std::size_t position) const {
    return {dep_positions_.data() + dep_offsets_[position], dep_positions_.data() + dep_offsets_[position + 1]};
  }

  // Writes the residency rule's flags for `devices` (one in-range device per region) into
  // `resident`. Each device keeps resident, greedily, the regions whose streaming would cost
  // most (param_bytes * stream_s_per_byte: on one device, the largest first; position breaks
  // ties), skipping any that no longer fit in its capacity. Never exceeds a capacity.
  void assign_residency(const std::vector<std::int32_t>& devices, std::vector<bool>& resident) const;

  // Makespan in seconds of the list schedule of a checked assignment: regions in the order
  // listed, each device serial, a region starting when its device is free and every input
  // has arrived (a dependency's end, plus output_bytes * transfer_s_per_byte when the devices
  // differ), and lasting compute_s plus, when not resident, param_bytes * stream_s_per_byte.
  // +inf when a region runs where it cannot. Does not check capacities.
  double latency(const std::vector<std::int32_t>& devices, const std::vector<bool>& resident,
                 LatencyScratch& scratch) const;

  // The measures of a checked assignment in one pass over the same list schedule: latency_s
  // is exactly what latency() returns. Where a region runs where it cannot, latency_s and
  // bottleneck_s are +inf. traffic_bytes saturates at the int64 maximum. Does not check capacities.
  PlacementMeasures measure(const std::vector<std::int32_t>& devices, const std::vector<bool>& resident,
                            LatencyScratch& scratch) const;

  // True when every region can run on its device and no device's resident parameters exceed
  // its capacity.
  bool feasible(const std::vector<std::int32_t>& devices, const std::vector<bool>& resident) const;

 private:
  // The list schedule behind latency() and measure(); the measures are gathered only when
  // kMeasure, so latency() keeps its lean loop and both give the same makespan.
  template <bool kMeasure>
  double list_schedule(const std::vector<std::int32_t>& devices, const std::vector<bool>& resident,
                       LatencyScratch& scratch, PlacementMeasures* measures) const;

  // The problem flattened for latency(), whose inner loop is the search's hot spot.
  const PlacementProblem& problem_;
  std::vector<std::int32_t> residency_order_;
  std::vector<std::size_t> dep_offsets_;     // region r's deps are dep_positions_[dep_offsets_[r], dep_offsets_[r + 1])
  std::vector<std::int32_t> dep_positions_;
  std::vector<double> compute_s_;            // [region * devices + device]
  std::vector<double> stream_s_;             // [region * devices + device]: param_bytes * stream_s_per_byte
  std::vector<double> output_bytes_;         // per region
  std::vector<double> transfer_s_per_byte_;  // [from * devices + to]
  std::vector<bool> streams_;                // per device: stream_s_per_byte > 0, so streaming moves bytes
};

// The list-schedule makespan of `assignment` (see LatencyModel::latency). Throws
// Error(InvalidArgument) for an invalid problem or an assignment that does not fit it.
double evaluate_latency(const PlacementProblem& problem, const Assignment& assignment);

// The measures of `assignment` (see LatencyModel::measure). Throws Error(InvalidArgument) as
// evaluate_latency does.
PlacementMeasures measure_placement(const PlacementProblem& problem, const Assignment& assignment);

// True when `assignment` runs every region where it can and fits every capacity. Throws
// Error(InvalidArgument) as evaluate_latency does.
bool feasible(const PlacementProblem& problem, const Assignment& assignment);

// The assignment that places region i on devices[i] with residency by the rule (see
// LatencyModel::assign_residency). Throws Error(InvalidArgument) for an invalid problem or
// a device list of the wrong size or out of range.
Assignment assign_residency(const PlacementProblem& problem, const std::vector<std::int32_t>& devices);

}  // namespace tt
