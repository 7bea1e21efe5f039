// Tests of the searches under objective weights other than the latency alone.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "planner_test_support.h"
#include "tt/common/error.h"
#include "tt/planner/search.h"

namespace tt {
namespace {

using test::region;

constexpr ObjectiveWeights kLatency{1.0, 0.0, 0.0};
constexpr ObjectiveWeights kBottleneck{0.0, 1.0, 0.0};
constexpr ObjectiveWeights kTraffic{0.0, 0.0, 1.0};
// Comparable terms on random_problem: seconds of latency and bottleneck, and some 1000 bytes
// a transfer or stream, weighed at a millisecond each.
constexpr ObjectiveWeights kMix{1.0, 0.5, 1e-3};

struct NamedWeights {
  const char* name;
  ObjectiveWeights weights;
};
constexpr NamedWeights kObjectives[] = {
    {"latency", kLatency}, {"bottleneck", kBottleneck}, {"traffic", kTraffic}, {"mix", kMix}};

SearchOptions with_weights(const ObjectiveWeights& weights) {
  SearchOptions options;
  options.weights = weights;
  return options;
}

std::vector<std::int64_t> resident_bytes(const PlacementProblem& problem, const Assignment& assignment) {
  std::vector<std::int64_t> bytes(problem.devices.size(), 0);
  for (std::size_t r = 0; r < assignment.device.size(); ++r) {
    if (assignment.resident[r]) bytes[static_cast<std::size_t>(assignment.device[r])] += problem.regions[r].param_bytes;
  }
  return bytes;
}

// A fork of two equal branches joined again, on two equal devices with cheap transfers:
// running the branches side by side is faster, but moves bytes.
PlacementProblem fork_join() {
  PlacementProblem problem = test::problem_with_devices({1000, 1000});
  problem.transfer_s_per_byte = {{0.0, 1e-4}, {1e-4, 0.0}};
  problem.regions = {region(1, {}, {1.0, 1.0}, 10, 100), region(2, {1}, {1.0, 1.0}, 10, 100),
                     region(3, {1}, {1.0, 1.0}, 10, 100), region(4, {2, 3}, {1.0, 1.0}, 10, 0)};
  return problem;
}

TEST(SearchObjectivesTest, TrafficAloneKeepsEverythingOnOneDeviceThoughASplitIsFaster) {
  const PlacementProblem problem = fork_join();
  const SearchResult fastest = search_placement(problem, SearchOptions{});
  // The branches side by side: [0, 1], then [1, 2] on d0 and [1.01, 2.01] on d1, then the
  // join on d1 once branch 2's output arrives: [2.01, 3.01].
  EXPECT_DOUBLE_EQ(fastest.best_value, 3.01);
  EXPECT_EQ(measure_placement(problem, fastest.best).traffic_bytes, 200);

  const SearchResult quietest = search_placement(problem, with_weights(kTraffic));
  EXPECT_EQ(quietest.best_value, 0.0);
  EXPECT_EQ(quietest.best.device, (std::vector<std::int32_t>{0, 0, 0, 0}));  // d1 ties; d0 ranks first
  EXPECT_DOUBLE_EQ(measure_placement(problem, quietest.best).latency_s, 4.0);
  EXPECT_EQ(exhaustive_placement(problem, {}, kTraffic).best, quietest.best);
}

TEST(SearchObjectivesTest, BottleneckPrefersABalancedSplitWhereLatencyDoesNot) {
  // A chain of four equal regions: a split only adds a transfer to the latency, but halves
  // the work of the busiest device.
  PlacementProblem problem = test::problem_with_devices({1000, 1000});
  problem.transfer_s_per_byte = {{0.0, 0.1}, {0.1, 0.0}};
  problem.regions = {region(1, {}, {1.0, 1.0}, 0, 1), region(2, {1}, {1.0, 1.0}, 0, 1),
                     region(3, {2}, {1.0, 1.0}, 0, 1), region(4, {3}, {1.0, 1.0}, 0, 1)};
  const SearchResult fastest = search_placement(problem, SearchOptions{});
  EXPECT_DOUBLE_EQ(fastest.best_value, 4.0);
  EXPECT_EQ(fastest.best.device, (std::vector<std::int32_t>{0, 0, 0, 0}));

  const SearchResult balanced = search_placement(problem, with_weights(kBottleneck));
  // Two regions each; the receiving device also spends 0.1 s on the transfer.
  EXPECT_DOUBLE_EQ(balanced.best_value, 2.1);
  EXPECT_EQ(balanced.best.device, (std::vector<std::int32_t>{0, 0, 1, 1}));
  EXPECT_DOUBLE_EQ(measure_placement(problem, balanced.best).latency_s, 4.1);
  EXPECT_EQ(exhaustive_placement(problem, {}, kBottleneck).best, balanced.best);
}

TEST(SearchObjectivesTest, WithinOnePercentOfExhaustiveForEachObjective) {
  for (const NamedWeights& objective : kObjectives) {
    double worst_gap = 0.0;
    unsigned worst_seed = 0;
    for (unsigned seed = 1; seed <= 200; ++seed) {
      const std::size_t regions = 2 + seed % 7;  // 2..8
      const std::size_t devices = 2 + seed % 2;  // 2..3
      const PlacementProblem problem = test::random_problem(regions, devices, seed);
      const SearchResult optimum = exhaustive_placement(problem, {}, objective.weights);
      const SearchResult found = search_placement(problem, with_weights(objective.weights));
      for (const SearchResult* result : {&optimum, &found}) {
        ASSERT_FALSE(result->finalists.empty());
        for (std::size_t f = 0; f < result->finalists.size(); ++f) {
          const Assignment& finalist = result->finalists[f];
          EXPECT_EQ(finalist, assign_residency(problem, finalist.device));
          EXPECT_TRUE(feasible(problem, finalist));
          EXPECT_EQ(result->finalist_values[f],
                    weighted_value(objective.weights, measure_placement(problem, finalist)))
              << objective.name << " seed " << seed;
        }
      }
      EXPECT_GE(found.best_value, optimum.best_value) << objective.name << " seed " << seed;
      // Traffic can be 0 at the optimum; the search must then find 0 too.
      const double gap = optimum.best_value > 0 ? (found.best_value - optimum.best_value) / optimum.best_value
                                                : (found.best_value > 0 ? 1.0 : 0.0);
      EXPECT_LE(gap, 0.01) << objective.name << " seed " << seed << ": search " << found.best_value
                           << " vs optimum " << optimum.best_value;
      if (gap > worst_gap) {
        worst_gap = gap;
        worst_seed = seed;
      }
    }
    std::cout << "[ planner  ] " << objective.name << ": worst optimality gap over 200 instances: "
              << worst_gap * 100.0 << "% (seed " << worst_seed << ")\n";
  }
}

TEST(SearchObjectivesTest, ThreadCountDoesNotChangeTheResult) {
  for (const ObjectiveWeights& weights : {kBottleneck, kTraffic, kMix}) {
    for (unsigned seed = 1; seed <= 20; ++seed) {
      const PlacementProblem problem = test::random_problem(4 + seed % 40, 2 + seed % 3, seed);
      SearchOptions options = with_weights(weights);
      const SearchResult single = search_placement(problem, options);
      options.threads = 4;
      EXPECT_EQ(single, search_placement(problem, options)) << "seed " << seed;
    }
    const PlacementProblem chain = test::chain_problem(200, 4, 3);
    SearchOptions options = with_weights(ObjectiveWeights{weights.latency, weights.bottleneck,
                                                          weights.traffic_per_byte * 1e-9});  // bytes here are ~1e6
    const SearchResult single = search_placement(chain, options);
    options.threads = 4;
    EXPECT_EQ(single, search_placement(chain, options));
  }
}

TEST(SearchObjectivesTest, FinalistsNeverExceedCapacity) {
  for (const NamedWeights& objective : kObjectives) {
    for (unsigned seed = 1; seed <= 30; ++seed) {
      const PlacementProblem problem = test::random_problem(10 + seed % 20, 3, seed);
      SearchOptions options = with_weights(objective.weights);
      options.finalists = 6;
      const SearchResult result = search_placement(problem, options);
      EXPECT_EQ(result.finalists.size(), 6u) << objective.name << " seed " << seed;
      for (const Assignment& finalist : result.finalists) {
        const std::vector<std::int64_t> bytes = resident_bytes(problem, finalist);
        for (std::size_t d = 0; d < problem.devices.size(); ++d) {
          EXPECT_LE(bytes[d], problem.devices[d].capacity_bytes) << objective.name << " seed " << seed;
        }
        for (std::size_t r = 0; r < finalist.device.size(); ++r) {
          EXPECT_FALSE(std::isinf(problem.regions[r].compute_s[static_cast<std::size_t>(finalist.device[r])]));
        }
      }
    }
  }
}

TEST(SearchObjectivesTest, ScalingTheLatencyWeightScalesTheValuesOnly) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    const PlacementProblem problem = test::random_problem(6 + seed % 30, 2 + seed % 3, seed);
    const SearchResult plain = search_placement(problem, SearchOptions{});
    const SearchResult doubled = search_placement(problem, with_weights(ObjectiveWeights{2.0, 0.0, 0.0}));
    EXPECT_EQ(plain.finalists, doubled.finalists) << "seed " << seed;
    ASSERT_EQ(plain.finalist_values.size(), doubled.finalist_values.size());
    for (std::size_t f = 0; f < plain.finalist_values.size(); ++f) {
      EXPECT_EQ(2.0 * plain.finalist_values[f], doubled.finalist_values[f]) << "seed " << seed;
    }
  }
}

TEST(SearchObjectivesTest, AnEvaluatorOverridesTheWeights) {
  const PlacementProblem problem = fork_join();
  const Evaluator latency = [&problem](const Assignment& assignment) { return evaluate_latency(problem, assignment); };
  EXPECT_EQ(search_placement(problem, with_weights(kTraffic), latency), search_placement(problem, SearchOptions{}, latency));
  EXPECT_DOUBLE_EQ(exhaustive_placement(problem, latency, kTraffic).best_value, 3.01);
}

TEST(SearchObjectivesTest, InvalidWeightsAreRejected) {
  const PlacementProblem problem = test::random_problem(3, 2, 1);
  const auto message = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
      return error.what();
    }
    ADD_FAILURE() << "invalid weights were accepted";
    return "";
  };
  EXPECT_NE(message([&] { search_placement(problem, with_weights(ObjectiveWeights{1.0, -0.5, 0.0})); })
                .find("bottleneck must be finite and >= 0, got -0.5"),
            std::string::npos);
  EXPECT_NE(message([&] {
              search_placement(problem, with_weights(ObjectiveWeights{std::numeric_limits<double>::quiet_NaN(), 0, 1}));
            }).find("latency must be finite"),
            std::string::npos);
  EXPECT_NE(message([&] { exhaustive_placement(problem, {}, ObjectiveWeights{0.0, 0.0, 0.0}); })
                .find("at least one of latency, bottleneck and traffic_per_byte > 0"),
            std::string::npos);
  EXPECT_NE(message([&] { exhaustive_placement(problem, {}, ObjectiveWeights{1.0, 0.0, -1.0}); })
                .find("traffic_per_byte must be finite"),
            std::string::npos);
}

}  // namespace
}  // namespace tt
