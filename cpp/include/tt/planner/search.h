// The placement search: which device each region runs on, with residency by the rule.
#pragma once

#include <cstdint>
#include <vector>

#include "tt/planner/objective.h"
#include "tt/planner/placement_cost.h"

namespace tt {

// Knobs of search_placement; each is checked (see search_placement).
struct SearchOptions {
  std::int32_t beam_width = 8;     // partial placements kept per step, 1..65536
  std::int32_t threads = 1;        // threads valuing candidates, 1..256; never changes the result
  std::int32_t local_passes = 4;   // rounds of local improvement per start, >= 0
  std::int32_t finalists = 4;      // assignments returned and starts improved locally (twice as many starts
                                   // under weights other than the latency alone), 1..65536
  ObjectiveWeights weights;        // the value when there is no evaluator (default: the latency); see check_weights
};

// What a search found. Values are the evaluator's, or without one the weighted measures
// (weighted_value; the list-schedule latency with the default weights).
struct SearchResult {
  Assignment best;                        // == finalists[0]
  double best_value = 0.0;                // == finalist_values[0]
  std::vector<Assignment> finalists;      // best distinct assignments seen: by value, then devices lexicographically
  std::vector<double> finalist_values;    // their values
  std::int64_t evaluations = 0;           // complete assignments valued

  friend bool operator==(const SearchResult&, const SearchResult&) = default;
};

// Searches device placements of `problem`, each with residency by the rule (see
// LatencyModel::assign_residency), for the lowest value of `evaluator` (empty: the weighted
// measures of options.weights, by default the list-schedule latency; the beam then scores by
// them too). (1) A beam over regions in order (beam_placements); (2) local improvement
// (improve_locally) of `finalists` starts (2 * `finalists` when the weights are not the
// latency alone: those landscapes have more local optima) taken, best first, from the beam's
// placements and the all-on-one-device ones, preferring starts that differ from each
// other in at least an eighth of the regions; (3) the `finalists` best distinct
// assignments valued anywhere. The evaluator only sees feasible assignments; non-finite
// values rank last. The result is the same for any thread count.
// Throws Error(InvalidArgument) for an invalid problem or options (the weights are checked
// even with an evaluator), when a region can run on no device (naming it), or when the
// evaluator rated every assignment tried non-finite. Propagates what the evaluator throws.
SearchResult search_placement(const PlacementProblem& problem, const SearchOptions& options,
                              const Evaluator& evaluator = {});

// The combinations exhaustive_placement tries at most.
inline constexpr std::int64_t kExhaustiveLimit = 2'000'000;

// Tries every placement (each region on each device it can run on), for tests and
// benchmarks; returns the SearchOptions{}.finalists best by `evaluator`, or without one by
// the weighted measures. Throws Error(InvalidArgument) as search_placement does, and when the
// placements number more than kExhaustiveLimit.
SearchResult exhaustive_placement(const PlacementProblem& problem, const Evaluator& evaluator = {},
                                  const ObjectiveWeights& weights = {});

}  // namespace tt
