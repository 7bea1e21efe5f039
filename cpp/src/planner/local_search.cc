// Local improvement: value all neighbor moves in parallel, then commit the improving ones in order.
#include "tt/planner/local_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "tt/planner/parallel_for.h"

namespace tt {
namespace {

// How many of the best single steps are paired when none improves on its own.
constexpr std::size_t kPairCandidates = 16;

// One move, or two on disjoint regions applied together.
struct CompoundMove {
  PlacementMove first;
  std::optional<PlacementMove> second;
};

void apply_step(const PlacementMove& move, std::vector<std::int32_t>& devices) {
  for (std::int32_t r = move.first; r <= move.last; ++r) devices[static_cast<std::size_t>(r)] = move.device;
}

void apply_step(const CompoundMove& step, std::vector<std::int32_t>& devices) {
  apply_step(step.first, devices);
  if (step.second) apply_step(*step.second, devices);
}

// Undoes `step` on `buffer`, a copy of `original` with the step applied.
void restore(const CompoundMove& step, const std::vector<std::int32_t>& original, std::vector<std::int32_t>& buffer) {
  for (const std::optional<PlacementMove>& move : {std::optional<PlacementMove>(step.first), step.second}) {
    if (!move) continue;
    for (std::int32_t r = move->first; r <= move->last; ++r) {
      buffer[static_cast<std::size_t>(r)] = original[static_cast<std::size_t>(r)];
    }
  }
}

bool runnable(const PlacementProblem& problem, std::int32_t first, std::int32_t last, std::size_t device) {
  for (std::int32_t r = first; r <= last; ++r) {
    if (std::isinf(problem.regions[static_cast<std::size_t>(r)].compute_s[device])) return false;
  }
  return true;
}

}  // namespace

std::vector<PlacementMove> neighbor_moves(const PlacementProblem& problem, const std::vector<std::int32_t>& devices) {
  const auto count = static_cast<std::int32_t>(devices.size());
  const std::size_t device_count = problem.devices.size();
  std::vector<PlacementMove> moves;
  for (std::int32_t r = 0; r < count; ++r) {
    for (std::size_t d = 0; d < device_count; ++d) {
      if (static_cast<std::int32_t>(d) == devices[static_cast<std::size_t>(r)] || !runnable(problem, r, r, d)) continue;
      moves.push_back({r, r, static_cast<std::int32_t>(d)});
    }
  }
  // A chain split across devices pays a transfer at each boundary; moving a single region
  // off a run adds two, so runs move as a whole too.
  for (std::int32_t first = 0; first < count;) {
    std::int32_t last = first;
    const std::int32_t device = devices[static_cast<std::size_t>(first)];
    while (last + 1 < count && devices[static_cast<std::size_t>(last + 1)] == device) ++last;
    if (last > first) {
      for (std::size_t d = 0; d < device_count; ++d) {
        if (static_cast<std::int32_t>(d) == device || !runnable(problem, first, last, d)) continue;
        moves.push_back({first, last, static_cast<std::int32_t>(d)});
      }
    }
    first = last + 1;
  }
  return moves;
}

double improve_locally(const PlacementScorer& scorer, std::vector<std::int32_t>& devices, double value,
                       std::int32_t passes, std::int32_t threads, RankedPlacements& ranked) {
  const PlacementProblem& problem = scorer.model().problem();
  const auto workers = static_cast<std::size_t>(std::max<std::int32_t>(threads, 1));
  std::vector<ScoreScratch> scratch(workers);
  std::vector<std::vector<std::int32_t>> trial(workers);
  std::vector<std::int32_t> candidate;

  // Values every step applied to `devices`, in parallel: each worker applies a step to its
  // own copy, values it, and restores the copy. Offers each value to `ranked`.
  const auto value_steps = [&](const std::vector<CompoundMove>& steps) {
    std::vector<double> values(steps.size());
    for (std::vector<std::int32_t>& buffer : trial) buffer = devices;
    parallel_for(steps.size(), threads, [&](std::size_t m, std::int32_t worker) {
      std::vector<std::int32_t>& buffer = trial[static_cast<std::size_t>(worker)];
      apply_step(steps[m], buffer);
      values[m] = scorer.score(buffer, scratch[static_cast<std::size_t>(worker)]);
      restore(steps[m], devices, buffer);
    });
    for (std::size_t m = 0; m < steps.size(); ++m) {
      if (!ranked.could_keep(values[m])) continue;
      candidate = devices;
      apply_step(steps[m], candidate);
      ranked.offer(values[m], candidate);
    }
    return values;
  };
  // Indices of the steps, best value first (index breaks ties).
  const auto by_value = [](const std::vector<double>& values) {
    std::vector<std::size_t> order(values.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&values](std::size_t a, std::size_t b) {
      return values[a] != values[b] ? values[a] < values[b] : a < b;
    });
    return order;
  };

  for (std::int32_t pass = 0; pass < passes; ++pass) {
    std::vector<CompoundMove> steps;
    for (const PlacementMove& move : neighbor_moves(problem, devices)) steps.push_back({move, std::nullopt});
    const std::vector<double> values = value_steps(steps);
    const std::vector<std::size_t> order = by_value(values);

    if (!order.empty() && values[order.front()] < value) {
      // The best step applies to the placement it was valued on; later ones are valued
      // again on top of what was kept, since moves interact through devices and transfers.
      const double screened = value;
      bool changed = false;
      for (std::size_t m : order) {
        if (!(values[m] < screened)) break;
        candidate = devices;
        apply_step(steps[m], candidate);
        if (candidate == devices) continue;
        const double candidate_value = changed ? scorer.score(candidate, scratch[0]) : values[m];
        if (changed) ranked.offer(candidate_value, candidate);
        if (candidate_value < value) {
          devices.swap(candidate);
          value = candidate_value;
          changed = true;
        }
      }
      continue;
    }

    // No single step helps: some improvements need two at once (a run moving one way and a
    // region the other). Pairs of the most promising steps keep this independent of size.
    const std::size_t promising = std::min(order.size(), kPairCandidates);
    std::vector<CompoundMove> pairs;
    for (std::size_t i = 0; i < promising; ++i) {
      for (std::size_t j = i + 1; j < promising; ++j) {
        const PlacementMove& a = steps[order[i]].first;
        const PlacementMove& b = steps[order[j]].first;
        if (a.first <= b.last && b.first <= a.last) continue;  // overlapping regions
        pairs.push_back({a, b});
      }
    }
    const std::vector<double> pair_values = value_steps(pairs);
    const std::vector<std::size_t> pair_order = by_value(pair_values);
    if (pair_order.empty() || !(pair_values[pair_order.front()] < value)) break;
    apply_step(pairs[pair_order.front()], devices);
    value = pair_values[pair_order.front()];
  }
  return value;
}

}  // namespace tt
