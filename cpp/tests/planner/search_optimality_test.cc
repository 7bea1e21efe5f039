// Tests of search_placement against exhaustive_placement on many small random instances.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "planner_test_support.h"
#include "tt/planner/search.h"

namespace tt {
namespace {

// Checks what every search result must satisfy: residency by the rule, capacities kept,
// every region where it can run, finalists distinct and ordered, best == finalists[0].
void expect_well_formed(const PlacementProblem& problem, const SearchResult& result, unsigned seed) {
  ASSERT_FALSE(result.finalists.empty()) << "seed " << seed;
  ASSERT_EQ(result.finalists.size(), result.finalist_values.size());
  EXPECT_EQ(result.best, result.finalists.front()) << "seed " << seed;
  EXPECT_EQ(result.best_value, result.finalist_values.front()) << "seed " << seed;
  for (std::size_t f = 0; f < result.finalists.size(); ++f) {
    const Assignment& finalist = result.finalists[f];
    EXPECT_EQ(finalist, assign_residency(problem, finalist.device)) << "seed " << seed;
    EXPECT_TRUE(feasible(problem, finalist)) << "seed " << seed;
    EXPECT_DOUBLE_EQ(result.finalist_values[f], evaluate_latency(problem, finalist)) << "seed " << seed;
    if (f == 0) continue;
    const Assignment& previous = result.finalists[f - 1];
    const double previous_value = result.finalist_values[f - 1];
    const bool ordered = previous_value < result.finalist_values[f] ||
                         (previous_value == result.finalist_values[f] && previous.device < finalist.device);
    EXPECT_TRUE(ordered) << "seed " << seed << " finalist " << f;
  }
}

TEST(SearchOptimalityTest, WithinOnePercentOfExhaustiveOnRandomInstances) {
  double worst_gap = 0.0;
  unsigned worst_seed = 0;
  for (unsigned seed = 1; seed <= 200; ++seed) {
    const std::size_t regions = 2 + seed % 7;   // 2..8
    const std::size_t devices = 2 + seed % 2;   // 2..3
    const PlacementProblem problem = test::random_problem(regions, devices, seed);
    const SearchResult optimum = exhaustive_placement(problem);
    const SearchResult found = search_placement(problem, SearchOptions{});
    expect_well_formed(problem, optimum, seed);
    expect_well_formed(problem, found, seed);
    // Nothing beats the exhaustive optimum over the same space.
    EXPECT_GE(found.best_value, optimum.best_value - 1e-12) << "seed " << seed;
    const double gap = (found.best_value - optimum.best_value) / optimum.best_value;
    EXPECT_LE(gap, 0.01) << "seed " << seed << ": search " << found.best_value << " vs optimum " << optimum.best_value;
    if (gap > worst_gap) {
      worst_gap = gap;
      worst_seed = seed;
    }
  }
  std::cout << "[ planner  ] worst optimality gap over 200 instances: " << worst_gap * 100.0 << "% (seed "
            << worst_seed << ")\n";
}

TEST(SearchOptimalityTest, ExhaustiveFinalistsAreTheBestPlacements) {
  // Two independent regions, either device: the four placements in full.
  PlacementProblem problem = test::problem_with_devices({0, 0});
  problem.regions = {test::region(1, {}, {1.0, 2.0}), test::region(2, {}, {1.0, 3.0})};
  const SearchResult result = exhaustive_placement(problem);
  EXPECT_EQ(result.evaluations, 4);
  ASSERT_EQ(result.finalists.size(), 4u);
  // {0,1}: max(1, 3) = 3; {1,0}: max(2, 1) = 2; {0,0}: 2; {1,1}: 5. Ties go lexicographically.
  EXPECT_EQ(result.finalists[0].device, (std::vector<std::int32_t>{0, 0}));
  EXPECT_EQ(result.finalists[1].device, (std::vector<std::int32_t>{1, 0}));
  EXPECT_EQ(result.finalists[2].device, (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(result.finalists[3].device, (std::vector<std::int32_t>{1, 1}));
  EXPECT_EQ(result.finalist_values, (std::vector<double>{2.0, 2.0, 3.0, 5.0}));
}

TEST(SearchOptimalityTest, CustomEvaluatorDrivesBothSearches) {
  // An evaluator that wants as many regions as possible on the last device it may use.
  for (unsigned seed = 1; seed <= 20; ++seed) {
    const PlacementProblem problem = test::random_problem(6, 3, seed);
    const Evaluator on_last = [&problem](const Assignment& assignment) {
      double value = 0.0;
      for (std::int32_t device : assignment.device) value += device == 2 ? 0.0 : 1.0;
      return value + 1e-6 * evaluate_latency(problem, assignment);
    };
    const SearchResult optimum = exhaustive_placement(problem, on_last);
    const SearchResult found = search_placement(problem, SearchOptions{}, on_last);
    // The same number of regions off the last device; the latency term may differ slightly.
    EXPECT_LT(found.best_value - optimum.best_value, 1e-3) << "seed " << seed;
  }
}

}  // namespace
}  // namespace tt
