// Valuing device vectors through the evaluator, and the bounded best-few set.
#include "tt/planner/scoring.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tt {

PlacementScorer::PlacementScorer(const LatencyModel& model, const Evaluator& evaluator,
                                 const ObjectiveWeights& weights)
    : model_(model), evaluator_(evaluator), weights_(weights) {}

double PlacementScorer::score(const std::vector<std::int32_t>& devices, ScoreScratch& scratch) const {
  evaluations_.fetch_add(1, std::memory_order_relaxed);
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  Assignment& assignment = scratch.assignment;
  assignment.device = devices;
  model_.assign_residency(assignment.device, assignment.resident);
  if (!evaluator_) {
    // The latency alone needs none of measure()'s bookkeeping; its weight (1 by default)
    // scales every value alike.
    if (latency_only(weights_)) {
      return weights_.latency * model_.latency(assignment.device, assignment.resident, scratch.latency);
    }
    return weighted_value(weights_, model_.measure(assignment.device, assignment.resident, scratch.latency));
  }
  // The residency rule never overfills a device; only a region placed where it cannot run
  // makes the vector infeasible, and a custom evaluator must not see such a vector.
  if (!model_.feasible(assignment.device, assignment.resident)) return kInfinity;
  const double value = evaluator_(assignment);
  return std::isfinite(value) ? value : kInfinity;
}

bool ranks_before(const RankedPlacement& a, const RankedPlacement& b) {
  if (a.value != b.value) return a.value < b.value;
  return a.devices < b.devices;
}

bool RankedPlacements::could_keep(double value) const {
  if (std::isinf(value) || std::isnan(value)) return false;
  return entries_.size() < limit_ || value <= entries_.back().value;
}

void RankedPlacements::offer(double value, const std::vector<std::int32_t>& devices) {
  if (!could_keep(value)) return;
  for (const RankedPlacement& entry : entries_) {
    if (entry.devices == devices) return;
  }
  RankedPlacement candidate{value, devices};
  const auto at = std::lower_bound(entries_.begin(), entries_.end(), candidate, ranks_before);
  if (entries_.size() == limit_ && at == entries_.end()) return;
  entries_.insert(at, std::move(candidate));
  if (entries_.size() > limit_) entries_.pop_back();
}

}  // namespace tt
