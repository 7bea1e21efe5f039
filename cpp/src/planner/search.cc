// The placement search (beam, then local improvement) and the exhaustive reference.
#include "tt/planner/search.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>

#include "tt/common/error.h"
#include "tt/planner/beam.h"
#include "tt/planner/local_search.h"
#include "tt/planner/parallel_for.h"
#include "tt/planner/scoring.h"

namespace tt {
namespace {

constexpr std::int32_t kMaxThreads = 256;
constexpr std::int32_t kMaxWidth = 65536;  // beam states and finalists are kept in full; bounds memory

void check_option(const char* name, std::int32_t value, std::int32_t low, std::int32_t high) {
  if (value < low || value > high) {
    throw Error(ErrorCode::InvalidArgument, std::string("search options: ") + name + " must be in [" +
                                                std::to_string(low) + ", " + std::to_string(high) + "], got " +
                                                std::to_string(value));
  }
}

// Per region, the devices it can run on, ascending. Throws naming the first region that has none.
std::vector<std::vector<std::int32_t>> runnable_devices(const PlacementProblem& problem, const char* caller) {
  std::vector<std::vector<std::int32_t>> allowed(problem.regions.size());
  for (std::size_t r = 0; r < problem.regions.size(); ++r) {
    const PlacementRegion& region = problem.regions[r];
    for (std::size_t d = 0; d < region.compute_s.size(); ++d) {
      if (!std::isinf(region.compute_s[d])) allowed[r].push_back(static_cast<std::int32_t>(d));
    }
    if (allowed[r].empty()) {
      throw Error(ErrorCode::InvalidArgument, std::string(caller) + ": region " + std::to_string(region.id) +
                                                  " can run on no device (compute_s is +inf on all " +
                                                  std::to_string(problem.devices.size()) + ")");
    }
  }
  return allowed;
}

SearchResult make_result(const LatencyModel& model, const RankedPlacements& ranked, std::int64_t evaluations,
                         const char* caller) {
  if (ranked.entries().empty()) {
    throw Error(ErrorCode::InvalidArgument, std::string(caller) + ": the evaluator rated all " +
                                                std::to_string(evaluations) +
                                                " assignments tried +inf or NaN; expected a finite value for some");
  }
  SearchResult result;
  for (const RankedPlacement& entry : ranked.entries()) {
    Assignment assignment;
    assignment.device = entry.devices;
    model.assign_residency(assignment.device, assignment.resident);
    result.finalists.push_back(std::move(assignment));
    result.finalist_values.push_back(entry.value);
  }
  result.best = result.finalists.front();
  result.best_value = result.finalist_values.front();
  result.evaluations = evaluations;
  return result;
}

// Starts that do not depend on the beam's prefix estimate: per device, everything there
// where it can run, the rest on their fastest device. The beam is myopic (its scores cannot
// see the room and transfers later regions will need) and its states differ only in their
// last few regions; on chains these starts improve into markedly better placements.
std::vector<std::vector<std::int32_t>> uniform_starts(const PlacementProblem& problem,
                                                      const std::vector<std::vector<std::int32_t>>& allowed) {
  std::vector<std::vector<std::int32_t>> starts;
  for (std::size_t d = 0; d < problem.devices.size(); ++d) {
    std::vector<std::int32_t> devices(problem.regions.size());
    for (std::size_t r = 0; r < devices.size(); ++r) {
      const std::vector<double>& compute = problem.regions[r].compute_s;
      if (!std::isinf(compute[d])) {
        devices[r] = static_cast<std::int32_t>(d);
        continue;
      }
      devices[r] = *std::min_element(allowed[r].begin(), allowed[r].end(), [&compute](std::int32_t a, std::int32_t b) {
        return compute[static_cast<std::size_t>(a)] < compute[static_cast<std::size_t>(b)];
      });
    }
    starts.push_back(std::move(devices));
  }
  return starts;
}

// The starts worth improving: `count` of the finite ones, best first, skipping any within
// an eighth of the regions of one already taken while others remain. Beam states share all
// but their last few regions, and improving near-copies would only find one basin again.
std::vector<RankedPlacement> choose_starts(const std::vector<RankedPlacement>& valued, std::size_t count) {
  std::vector<RankedPlacement> chosen;
  std::vector<bool> taken(valued.size(), false);
  const std::size_t regions = valued.empty() ? 0 : valued.front().devices.size();
  const std::size_t distinct = std::max<std::size_t>(1, (regions + 7) / 8);
  const auto far_from_chosen = [&](const RankedPlacement& start) {
    for (const RankedPlacement& other : chosen) {
      std::size_t differ = 0;
      for (std::size_t r = 0; r < regions; ++r) differ += start.devices[r] != other.devices[r] ? 1 : 0;
      if (differ < distinct) return false;
    }
    return true;
  };
  for (bool strict : {true, false}) {
    for (std::size_t s = 0; s < valued.size() && chosen.size() < count; ++s) {
      if (taken[s] || !std::isfinite(valued[s].value) || (strict && !far_from_chosen(valued[s]))) continue;
      taken[s] = true;
      chosen.push_back(valued[s]);
    }
  }
  return chosen;
}

}  // namespace

SearchResult search_placement(const PlacementProblem& problem, const SearchOptions& options,
                              const Evaluator& evaluator) {
  check_option("beam_width", options.beam_width, 1, kMaxWidth);
  check_option("threads", options.threads, 1, kMaxThreads);
  check_option("local_passes", options.local_passes, 0, INT32_MAX);
  check_option("finalists", options.finalists, 1, kMaxWidth);
  check_weights(options.weights);
  const LatencyModel model(problem);
  const std::vector<std::vector<std::int32_t>> allowed = runnable_devices(problem, "search_placement");
  // An evaluator replaces the weighted measures; the beam then ranks by latency as before.
  const ObjectiveWeights weights = evaluator ? ObjectiveWeights{} : options.weights;
  const PlacementScorer scorer(model, evaluator, weights);

  std::vector<std::vector<std::int32_t>> starts = beam_placements(model, options.beam_width, weights);
  for (std::vector<std::int32_t>& start : uniform_starts(problem, allowed)) {
    if (std::find(starts.begin(), starts.end(), start) == starts.end()) starts.push_back(std::move(start));
  }
  std::vector<RankedPlacement> valued(starts.size());
  std::vector<ScoreScratch> scratch(static_cast<std::size_t>(options.threads));
  parallel_for(starts.size(), options.threads, [&](std::size_t s, std::int32_t worker) {
    valued[s] = RankedPlacement{scorer.score(starts[s], scratch[static_cast<std::size_t>(worker)]), starts[s]};
  });
  std::sort(valued.begin(), valued.end(), ranks_before);

  const auto finalist_count = static_cast<std::size_t>(options.finalists);
  RankedPlacements ranked(finalist_count);
  for (const RankedPlacement& start : valued) ranked.offer(start.value, start.devices);
  // A bottleneck (a maximum over devices) or a traffic (whole bytes) term flattens the
  // landscape into more local optima than the latency has; improving twice as many starts
  // finds the best basin about as often (see search_objectives_test) for about twice the time.
  const std::size_t start_count = latency_only(weights) ? finalist_count : 2 * finalist_count;
  for (const RankedPlacement& start : choose_starts(valued, start_count)) {
    std::vector<std::int32_t> devices = start.devices;
    improve_locally(scorer, devices, start.value, options.local_passes, options.threads, ranked);
  }
  return make_result(model, ranked, scorer.evaluations(), "search_placement");
}

SearchResult exhaustive_placement(const PlacementProblem& problem, const Evaluator& evaluator,
                                  const ObjectiveWeights& weights) {
  check_weights(weights);
  const LatencyModel model(problem);
  const std::vector<std::vector<std::int32_t>> allowed = runnable_devices(problem, "exhaustive_placement");
  // Counted in double: an exact int64 product could overflow, and beyond the limit only the
  // order of magnitude matters to the message.
  double combinations = 1.0;
  for (const std::vector<std::int32_t>& choices : allowed) combinations *= static_cast<double>(choices.size());
  if (combinations > static_cast<double>(kExhaustiveLimit)) {
    std::ostringstream count;
    count << std::setprecision(combinations < 1e15 ? 15 : 3) << combinations;
    throw Error(ErrorCode::InvalidArgument, "exhaustive_placement: expected at most " +
                                                std::to_string(kExhaustiveLimit) + " placements, got " + count.str() +
                                                " (" + std::to_string(problem.regions.size()) + " regions on " +
                                                std::to_string(problem.devices.size()) + " devices)");
  }

  const PlacementScorer scorer(model, evaluator, weights);
  RankedPlacements ranked(static_cast<std::size_t>(SearchOptions{}.finalists));
  ScoreScratch scratch;
  // An odometer over each region's runnable devices, the last region turning fastest.
  std::vector<std::size_t> choice(allowed.size(), 0);
  std::vector<std::int32_t> devices(allowed.size());
  for (std::size_t r = 0; r < allowed.size(); ++r) devices[r] = allowed[r][0];
  while (true) {
    ranked.offer(scorer.score(devices, scratch), devices);
    bool advanced = false;
    for (std::size_t r = allowed.size(); r-- > 0;) {
      if (++choice[r] < allowed[r].size()) {
        devices[r] = allowed[r][choice[r]];
        advanced = true;
        break;
      }
      choice[r] = 0;
      devices[r] = allowed[r][0];
    }
    if (!advanced) break;
  }
  return make_result(model, ranked, scorer.evaluations(), "exhaustive_placement");
}

}  // namespace tt
