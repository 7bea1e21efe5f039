// The beam over regions: each step extends every kept prefix by every device and keeps the best.
#include "tt/planner/beam.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tt {
namespace {

// A partial placement of regions [0, devices.size()) with its list schedule so far.
struct BeamState {
  std::vector<std::int32_t> devices;
  std::vector<double> end;               // per placed region: when it finishes
  std::vector<double> device_free;       // per device
  std::vector<std::int64_t> room;        // per device: capacity not yet taken by resident parameters
  double makespan = 0.0;
  double path_bound = 0.0;               // max over placed regions of end + tail (see Bounds)
  std::size_t lex_rank = 0;              // rank of `devices` among the beam, lexicographically
};

// A state extended by one region, kept as a delta until it is selected.
struct Child {
  std::size_t parent = 0;
  std::int32_t device = 0;
  double bound = 0.0;
  double path_bound = 0.0;
  double makespan = 0.0;
  double end = 0.0;
  bool resident = false;
};

// What the regions not yet placed will at least add, whatever their devices: the lower
// bounds that let the beam look past its prefix. In a list schedule a device's later
// regions start after its current end, so both bounds hold for every completion.
struct Bounds {
  std::vector<double> tail;        // per region: the longest chain of fastest compute times after it
  std::vector<double> work_after;  // per region: total fastest compute time of the regions listed after it
};

Bounds lower_bounds(const LatencyModel& model) {
  const PlacementProblem& problem = model.problem();
  const std::size_t count = problem.regions.size();
  std::vector<double> fastest(count);
  for (std::size_t r = 0; r < count; ++r) {
    fastest[r] = *std::min_element(problem.regions[r].compute_s.begin(), problem.regions[r].compute_s.end());
  }
  Bounds bounds{std::vector<double>(count, 0.0), std::vector<double>(count, 0.0)};
  for (std::size_t r = count; r-- > 0;) {
    if (r + 1 < count) bounds.work_after[r] = bounds.work_after[r + 1] + fastest[r + 1];
    for (std::int32_t dep : model.deps(r)) {
      const auto p = static_cast<std::size_t>(dep);
      bounds.tail[p] = std::max(bounds.tail[p], fastest[r] + bounds.tail[r]);
    }
  }
  return bounds;
}

}  // namespace

std::vector<std::vector<std::int32_t>> beam_placements(const LatencyModel& model, std::int32_t beam_width) {
  const PlacementProblem& problem = model.problem();
  const std::size_t width = static_cast<std::size_t>(std::max<std::int32_t>(beam_width, 1));
  const std::size_t device_count = problem.devices.size();

  std::vector<BeamState> beam(1);
  beam[0].device_free.assign(device_count, 0.0);
  for (const PlacementDevice& device : problem.devices) beam[0].room.push_back(device.capacity_bytes);

  const Bounds bounds = lower_bounds(model);
  const double device_divisor = static_cast<double>(device_count);
  std::vector<Child> children;
  for (std::size_t r = 0; r < problem.regions.size(); ++r) {
    const PlacementRegion& region = problem.regions[r];
    children.clear();
    for (std::size_t s = 0; s < beam.size(); ++s) {
      const BeamState& state = beam[s];
      for (std::size_t d = 0; d < device_count; ++d) {
        if (std::isinf(region.compute_s[d])) continue;
        double start = state.device_free[d];
        for (std::int32_t dep : model.deps(r)) {
          const auto p = static_cast<std::size_t>(dep);
          const auto from = static_cast<std::size_t>(state.devices[p]);
          double ready = state.end[p];
          if (from != d) {
            ready += static_cast<double>(problem.regions[p].output_bytes) * problem.transfer_s_per_byte[from][d];
          }
          start = std::max(start, ready);
        }
        const bool resident = region.param_bytes <= state.room[d];
        double duration = region.compute_s[d];
        if (!resident) duration += static_cast<double>(region.param_bytes) * problem.stream_s_per_byte[d];
        const double end = start + duration;
        const double path_bound = std::max(state.path_bound, end + bounds.tail[r]);
        // Every device's free time, this region's end on d, and the work still to place.
        double busy = end + bounds.work_after[r];
        for (std::size_t other = 0; other < device_count; ++other) {
          if (other != d) busy += state.device_free[other];
        }
        const double makespan = std::max(state.makespan, end);
        const double bound = std::max({makespan, path_bound, busy / device_divisor});
        children.push_back(Child{s, static_cast<std::int32_t>(d), bound, path_bound, makespan, end, resident});
      }
    }
    if (children.empty()) return {};

    // A strict total order: distinct children differ in parent or device, and distinct
    // parents differ in lex_rank, so the selection does not depend on sort stability.
    const auto better = [&beam](const Child& a, const Child& b) {
      if (a.bound != b.bound) return a.bound < b.bound;
      if (a.makespan != b.makespan) return a.makespan < b.makespan;
      if (a.end != b.end) return a.end < b.end;
      if (beam[a.parent].lex_rank != beam[b.parent].lex_rank) return beam[a.parent].lex_rank < beam[b.parent].lex_rank;
      return a.device < b.device;
    };
    const std::size_t kept = std::min(width, children.size());
    std::partial_sort(children.begin(), children.begin() + static_cast<std::ptrdiff_t>(kept), children.end(), better);
    children.resize(kept);

    // The next beam's lexicographic ranks: prefixes compare as their parents do, then by
    // the new device. Computed before the parents are moved from.
    std::vector<std::size_t> by_lex(kept);
    std::iota(by_lex.begin(), by_lex.end(), 0);
    std::sort(by_lex.begin(), by_lex.end(), [&](std::size_t a, std::size_t b) {
      const std::size_t rank_a = beam[children[a].parent].lex_rank;
      const std::size_t rank_b = beam[children[b].parent].lex_rank;
      return rank_a != rank_b ? rank_a < rank_b : children[a].device < children[b].device;
    });
    std::vector<std::size_t> lex_rank(kept);
    for (std::size_t rank = 0; rank < kept; ++rank) lex_rank[by_lex[rank]] = rank;

    // A parent's last selected child takes its buffers; the others copy them.
    std::vector<std::size_t> uses(beam.size(), 0);
    for (const Child& child : children) ++uses[child.parent];
    std::vector<BeamState> next;
    next.reserve(kept);
    for (std::size_t c = 0; c < kept; ++c) {
      const Child& child = children[c];
      next.push_back(--uses[child.parent] == 0 ? std::move(beam[child.parent]) : beam[child.parent]);
      BeamState& state = next.back();
      const auto d = static_cast<std::size_t>(child.device);
      state.devices.push_back(child.device);
      state.end.push_back(child.end);
      state.device_free[d] = child.end;
      if (child.resident) state.room[d] -= region.param_bytes;
      state.makespan = child.makespan;
      state.path_bound = child.path_bound;
      state.lex_rank = lex_rank[c];
    }
    beam = std::move(next);
  }

  std::vector<std::vector<std::int32_t>> placements;
  placements.reserve(beam.size());
  for (BeamState& state : beam) placements.push_back(std::move(state.devices));
  return placements;
}

}  // namespace tt
