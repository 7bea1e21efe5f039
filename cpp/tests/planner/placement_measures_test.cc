// Tests of the placement measures (latency, bottleneck, traffic) and of objective weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "planner_test_support.h"
#include "tt/common/error.h"
#include "tt/planner/objective.h"
#include "tt/planner/placement_cost.h"

namespace tt {
namespace {

using test::kCannotRun;
using test::region;

// Two devices; moving a byte from d0 to d1 costs 0.01 s and back 0.02 s; streaming a
// parameter byte costs 0.001 s to d0 and nothing to d1 (its parameters are already there).
PlacementProblem diamond() {
  PlacementProblem problem = test::problem_with_devices({1000, 1000});
  problem.transfer_s_per_byte = {{0.0, 0.01}, {0.02, 0.0}};
  problem.stream_s_per_byte = {0.001, 0.0};
  problem.regions = {region(1, {}, {1.0, 0.5}, 100, 10), region(2, {1}, {2.0, 1.0}, 200, 20),
                     region(3, {1}, {3.0, 1.5}, 0, 5), region(4, {2, 3}, {1.0, 1.0}, 50, 0)};
  return problem;
}

// The measures as their definition reads, computed apart from the model: per device the
// durations of its regions plus, once per (source, device), the transfer of each input from
// elsewhere; the bytes of those transfers and of streamed parameters where streaming costs.
std::pair<double, std::int64_t> reference_bottleneck_and_traffic(const PlacementProblem& problem,
                                                                 const Assignment& assignment) {
  std::vector<double> busy(problem.devices.size(), 0.0);
  std::set<std::pair<std::size_t, std::int32_t>> moved;
  std::int64_t traffic = 0;
  for (std::size_t r = 0; r < problem.regions.size(); ++r) {
    const PlacementRegion& reader = problem.regions[r];
    const std::int32_t d = assignment.device[r];
    const auto device = static_cast<std::size_t>(d);
    busy[device] += reader.compute_s[device];
    if (!assignment.resident[r]) {
      busy[device] += static_cast<double>(reader.param_bytes) * problem.stream_s_per_byte[device];
      if (problem.stream_s_per_byte[device] > 0) traffic += reader.param_bytes;
    }
    for (std::int64_t id : reader.deps) {
      const auto p = static_cast<std::size_t>(
          std::find_if(problem.regions.begin(), problem.regions.end(),
                       [id](const PlacementRegion& candidate) { return candidate.id == id; }) -
          problem.regions.begin());
      const std::int32_t from = assignment.device[p];
      if (from == d || !moved.insert({p, d}).second) continue;
      busy[device] += static_cast<double>(problem.regions[p].output_bytes) *
                      problem.transfer_s_per_byte[static_cast<std::size_t>(from)][device];
      traffic += problem.regions[p].output_bytes;
    }
  }
  return {*std::max_element(busy.begin(), busy.end()), traffic};
}

TEST(PlacementMeasuresTest, ComputedByHandOnADiamond) {
  const PlacementProblem problem = diamond();
  // Region 1 streams on d0; region 2 is not resident on d1, where streaming is free.
  const Assignment split{{0, 1, 1, 0}, {false, false, true, false}};
  const PlacementMeasures measures = measure_placement(problem, split);
  // d0: region 1 [0, 1.1] (1 s + 100 bytes streamed). Its 10 bytes reach d1 at 1.2: region 2
  // [1.2, 2.2], region 3 [2.2, 3.7]. Region 4 on d0 waits for 20 bytes from region 2 (arrive
  // 2.6) and 5 from region 3 (arrive 3.8): [3.8, 4.85] (1 s + 50 bytes streamed).
  EXPECT_DOUBLE_EQ(measures.latency_s, 4.85);
  EXPECT_EQ(measures.latency_s, evaluate_latency(problem, split));
  // d0 works 1.1 + 1.05 and receives 0.4 + 0.1; d1 works 1 + 1.5 and receives region 1's
  // output once (0.1 s) although two of its regions read it.
  EXPECT_DOUBLE_EQ(measures.bottleneck_s, 2.65);
  // Streamed on d0: 100 + 50 (region 2's 200 bytes stream to d1 at no cost: not counted);
  // region 1's output moves to d1 once (10), regions 2 and 3 send theirs to d0 (20 + 5).
  EXPECT_EQ(measures.traffic_bytes, 185);

  // Everything on d0 and resident: nothing moves, the busiest device does all the work.
  const PlacementMeasures together = measure_placement(problem, Assignment{{0, 0, 0, 0}, {true, true, true, true}});
  EXPECT_DOUBLE_EQ(together.latency_s, 7.0);
  EXPECT_DOUBLE_EQ(together.bottleneck_s, 7.0);
  EXPECT_EQ(together.traffic_bytes, 0);
}

TEST(PlacementMeasuresTest, WhereARegionCannotRunTheTimesAreInfinite) {
  PlacementProblem problem = diamond();
  problem.regions[2].compute_s[1] = kCannotRun;
  const PlacementMeasures measures = measure_placement(problem, Assignment{{0, 1, 1, 0}, {true, true, true, true}});
  EXPECT_EQ(measures.latency_s, kCannotRun);
  EXPECT_EQ(measures.bottleneck_s, kCannotRun);
  EXPECT_EQ(weighted_value(ObjectiveWeights{0.0, 0.0, 1.0}, measures), kCannotRun);  // traffic alone is finite
}

TEST(PlacementMeasuresTest, MatchTheListScheduleAndTheDefinitionOnRandomInstances) {
  for (unsigned seed = 1; seed <= 100; ++seed) {
    const PlacementProblem problem = test::random_problem(3 + seed % 15, 2 + seed % 3, seed);
    const LatencyModel model(problem);
    LatencyScratch scratch;
    for (unsigned variant = 0; variant < 5; ++variant) {
      std::vector<std::int32_t> devices;
      for (std::size_t r = 0; r < problem.regions.size(); ++r) {
        const std::vector<double>& compute = problem.regions[r].compute_s;
        auto d = static_cast<std::int32_t>((r * (variant + 3) + seed) % compute.size());
        while (std::isinf(compute[static_cast<std::size_t>(d)])) d = (d + 1) % static_cast<std::int32_t>(compute.size());
        devices.push_back(d);
      }
      const Assignment assignment = assign_residency(problem, devices);
      const PlacementMeasures measures = model.measure(assignment.device, assignment.resident, scratch);
      // Bit for bit: the search relies on the measured latency being the latency.
      EXPECT_EQ(measures.latency_s, model.latency(assignment.device, assignment.resident, scratch)) << "seed " << seed;
      const auto [bottleneck, traffic] = reference_bottleneck_and_traffic(problem, assignment);
      EXPECT_NEAR(measures.bottleneck_s, bottleneck, 1e-9 * bottleneck) << "seed " << seed;
      EXPECT_EQ(measures.traffic_bytes, traffic) << "seed " << seed;
      // The default weights value a placement at its latency exactly.
      EXPECT_EQ(weighted_value(ObjectiveWeights{}, measures), measures.latency_s) << "seed " << seed;
    }
  }
}

TEST(PlacementMeasuresTest, MeasurePlacementChecksItsArguments) {
  const PlacementProblem problem = diamond();
  try {
    measure_placement(problem, Assignment{{0, 1}, {true, true}});
    ADD_FAILURE() << "a short assignment was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(error.what()).find("expected 4 devices and residency flags"), std::string::npos);
  }
}

TEST(ObjectiveWeightsTest, WeightedValueSumsTheWeightedMeasures) {
  const PlacementMeasures measures{2.0, 1.5, 1000};
  EXPECT_DOUBLE_EQ(weighted_value(ObjectiveWeights{}, measures), 2.0);
  EXPECT_DOUBLE_EQ(weighted_value(ObjectiveWeights{0.0, 1.0, 0.0}, measures), 1.5);
  EXPECT_DOUBLE_EQ(weighted_value(ObjectiveWeights{0.0, 0.0, 0.5}, measures), 500.0);
  EXPECT_DOUBLE_EQ(weighted_value(ObjectiveWeights{2.0, 4.0, 0.001}, measures), 4.0 + 6.0 + 1.0);
  EXPECT_TRUE(latency_only(ObjectiveWeights{3.0, 0.0, 0.0}));
  EXPECT_FALSE(latency_only(ObjectiveWeights{1.0, 0.0, 1e-9}));
}

TEST(ObjectiveWeightsTest, RejectsNegativeNonFiniteAndAllZeroWeights) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::pair<ObjectiveWeights, std::string> cases[] = {
      {{-1.0, 0.0, 0.0}, "objective weights: latency must be finite and >= 0, got -1"},
      {{1.0, nan, 0.0}, "objective weights: bottleneck must be finite and >= 0, got nan"},
      {{1.0, 0.0, inf}, "objective weights: traffic_per_byte must be finite and >= 0, got inf"},
      {{0.0, 0.0, 0.0}, "expected at least one of latency, bottleneck and traffic_per_byte > 0, got all 0"},
  };
  for (const auto& [weights, expected] : cases) {
    try {
      check_weights(weights);
      ADD_FAILURE() << "accepted weights; expected: " << expected;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  }
  check_weights(ObjectiveWeights{});
  check_weights(ObjectiveWeights{0.0, 0.0, 1e-12});
}

}  // namespace
}  // namespace tt
