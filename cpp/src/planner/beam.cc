// The beam over regions: each step extends every kept prefix by every device and keeps the best.
#include "tt/planner/beam.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tt {
namespace {

// Byte counts are >= 0; a sum past the int64 range stays at its maximum instead of wrapping.
std::int64_t add_saturating(std::int64_t total, std::int64_t bytes) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  return total > kMax - bytes ? kMax : total + bytes;
}

// A partial placement of regions [0, devices.size()) with its list schedule so far.
struct BeamState {
  std::vector<std::int32_t> devices;
  std::vector<double> end;               // per placed region: when it finishes
  std::vector<double> device_free;       // per device
  std::vector<std::int64_t> room;        // per device: capacity not yet taken by resident parameters
  double makespan = 0.0;
  double path_bound = 0.0;               // max over placed regions of end + tail (see Bounds)
  std::size_t lex_rank = 0;              // rank of `devices` among the beam, lexicographically
  // Kept only when the weights are not the latency alone (see weighted_bound):
  std::vector<double> busy;                // per device: compute of its regions plus the inputs they receive
  std::vector<std::int64_t> placed_bytes;  // per device: parameter bytes of its regions
  std::int64_t moved_bytes = 0;            // outputs sent to other devices so far
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
  double received_s = 0.0;          // weighted only: transfer time of inputs new to the device
  std::int64_t received_bytes = 0;  // weighted only: their bytes
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

// Per region, positions of the regions that read it, ascending.
std::vector<std::vector<std::int32_t>> readers_of(const LatencyModel& model) {
  std::vector<std::vector<std::int32_t>> readers(model.problem().regions.size());
  for (std::size_t r = 0; r < readers.size(); ++r) {
    for (std::int32_t dep : model.deps(r)) readers[static_cast<std::size_t>(dep)].push_back(static_cast<std::int32_t>(r));
  }
  return readers;
}

// True when a region placed before `position` on `device` already reads `source`, so its
// output reaches that device anyway.
bool already_received(const BeamState& state, const std::vector<std::int32_t>& readers_of_source,
                      std::size_t position, std::int32_t device) {
  for (std::int32_t reader : readers_of_source) {
    const auto q = static_cast<std::size_t>(reader);
    if (q >= position) return false;
    if (state.devices[q] == device) return true;
  }
  return false;
}

// The score of a child under weights other than the latency alone: the weighted sum of a
// bound per measure. The bottleneck and traffic bounds hold for every completion, whatever the
// final residency: compute and received inputs only grow, streaming is at least the bytes
// beyond a device's capacity (no residency keeps more than fits), and the work still to
// place adds at least its fastest compute time to some device. The latency term is the
// makespan bound the latency-only beam ranks by. Weights are >= 0, so the sum bounds the
// weighted value of every completion just as the makespan bound bounds its latency.
double weighted_bound(const PlacementProblem& problem, const ObjectiveWeights& weights, const BeamState& state,
                      const Child& child, std::int64_t param_bytes, double compute_s, double work_after) {
  const std::size_t device_count = problem.devices.size();
  const auto d = static_cast<std::size_t>(child.device);
  double heaviest = 0.0;
  double total = work_after;
  std::int64_t streamed = 0;
  for (std::size_t e = 0; e < device_count; ++e) {
    double busy = state.busy[e];
    std::int64_t bytes = state.placed_bytes[e];
    if (e == d) {
      busy += compute_s + child.received_s;
      bytes = add_saturating(bytes, param_bytes);
    }
    const std::int64_t capacity = problem.devices[e].capacity_bytes;
    const std::int64_t over = bytes > capacity ? bytes - capacity : 0;
    busy += static_cast<double>(over) * problem.stream_s_per_byte[e];
    if (problem.stream_s_per_byte[e] > 0) streamed = add_saturating(streamed, over);
    heaviest = std::max(heaviest, busy);
    total += busy;
  }
  const double bottleneck = std::max(heaviest, total / static_cast<double>(device_count));
  const std::int64_t traffic = add_saturating(add_saturating(state.moved_bytes, child.received_bytes), streamed);
  double value = 0.0;
  if (weights.latency != 0) value += weights.latency * child.bound;
  if (weights.bottleneck != 0) value += weights.bottleneck * bottleneck;
  if (weights.traffic_per_byte != 0) value += weights.traffic_per_byte * static_cast<double>(traffic);
  return value;
}

}  // namespace

std::vector<std::vector<std::int32_t>> beam_placements(const LatencyModel& model, std::int32_t beam_width,
                                                       const ObjectiveWeights& weights) {
  const PlacementProblem& problem = model.problem();
  const std::size_t width = static_cast<std::size_t>(std::max<std::int32_t>(beam_width, 1));
  const std::size_t device_count = problem.devices.size();
  // The latency alone keeps the plain makespan bound (and its exact results); any other
  // weights rank children by weighted_bound, whose bookkeeping only they pay for.
  const bool weighted = !latency_only(weights);
  const std::vector<std::vector<std::int32_t>> readers =
      weighted ? readers_of(model) : std::vector<std::vector<std::int32_t>>{};

  std::vector<BeamState> beam(1);
  beam[0].device_free.assign(device_count, 0.0);
  for (const PlacementDevice& device : problem.devices) beam[0].room.push_back(device.capacity_bytes);
  if (weighted) {
    beam[0].busy.assign(device_count, 0.0);
    beam[0].placed_bytes.assign(device_count, 0);
  }

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
        Child child{s, static_cast<std::int32_t>(d), bound, path_bound, makespan, end, resident};
        if (weighted) {
          for (std::int32_t dep : model.deps(r)) {
            const auto p = static_cast<std::size_t>(dep);
            const std::int32_t from = state.devices[p];
            if (from == child.device || already_received(state, readers[p], r, child.device)) continue;
            const std::int64_t bytes = problem.regions[p].output_bytes;
            child.received_s +=
                static_cast<double>(bytes) * problem.transfer_s_per_byte[static_cast<std::size_t>(from)][d];
            child.received_bytes = add_saturating(child.received_bytes, bytes);
          }
          child.bound = weighted_bound(problem, weights, state, child, region.param_bytes, region.compute_s[d],
                                       bounds.work_after[r]);
        }
        children.push_back(child);
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
      if (weighted) {
        state.busy[d] += region.compute_s[d] + child.received_s;
        state.placed_bytes[d] = add_saturating(state.placed_bytes[d], region.param_bytes);
        state.moved_bytes = add_saturating(state.moved_bytes, child.received_bytes);
      }
    }
    beam = std::move(next);
  }

  std::vector<std::vector<std::int32_t>> placements;
  placements.reserve(beam.size());
  for (BeamState& state : beam) placements.push_back(std::move(state.devices));
  return placements;
}

}  // namespace tt
