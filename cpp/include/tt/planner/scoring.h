// Building blocks of the searches: valuing complete device vectors and keeping the best few.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "tt/planner/objective.h"
#include "tt/planner/placement_cost.h"

namespace tt {

// Per-thread buffers of PlacementScorer::score.
struct ScoreScratch {
  Assignment assignment;
  LatencyScratch latency;
};

// Values device vectors: residency by the rule, then the evaluator (when it is empty, the
// weighted value of the model's measures: its latency with the default weights). Infeasible
// vectors and non-finite evaluator values are +inf, so every value orders.
// Thread-safe when the evaluator is; keeps references to `model` and `evaluator`.
class PlacementScorer {
 public:
  // `evaluator` may be empty: weighted_value(weights, the model's measures) is used then.
  // `weights` must pass check_weights; they are ignored when there is an evaluator.
  PlacementScorer(const LatencyModel& model, const Evaluator& evaluator, const ObjectiveWeights& weights = {});

  // The value of `devices` (one in-range device per region); counts one evaluation.
  // Propagates whatever the evaluator throws.
  double score(const std::vector<std::int32_t>& devices, ScoreScratch& scratch) const;

  // Number of score() calls so far.
  std::int64_t evaluations() const noexcept { return evaluations_.load(std::memory_order_relaxed); }

  // The model this scorer evaluates with.
  const LatencyModel& model() const noexcept { return model_; }

 private:
  const LatencyModel& model_;
  const Evaluator& evaluator_;
  const ObjectiveWeights weights_;
  mutable std::atomic<std::int64_t> evaluations_{0};
};

// One valued device vector.
struct RankedPlacement {
  double value = 0.0;
  std::vector<std::int32_t> devices;
};

// True when `a` ranks before `b`: lower value, then the device vector lexicographically.
bool ranks_before(const RankedPlacement& a, const RankedPlacement& b);

// The `limit` best distinct device vectors offered, by ranks_before; +inf values are never
// kept. The kept set depends only on what was offered, not on the order of the offers.
// Not thread-safe: offer from one thread.
class RankedPlacements {
 public:
  // `limit` >= 1.
  explicit RankedPlacements(std::size_t limit) : limit_(limit) {}

  // False when a vector of this value certainly would not be kept (cheap pre-check before
  // building the vector).
  bool could_keep(double value) const;

  // Keeps (value, devices) if it ranks among the best `limit` and its devices are new.
  void offer(double value, const std::vector<std::int32_t>& devices);

  // The kept entries, best first.
  const std::vector<RankedPlacement>& entries() const noexcept { return entries_; }

 private:
  std::size_t limit_;
  std::vector<RankedPlacement> entries_;
};

}  // namespace tt
