// Tests of search_placement: determinism across threads, capacities, errors and scale.
#include "tt/planner/search.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>

#include "planner_test_support.h"
#include "tt/common/error.h"

namespace tt {
namespace {

using test::kCannotRun;
using test::region;

template <typename Call>
std::string error_of(Call&& call, ErrorCode expected_code) {
  try {
    call();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), expected_code) << error.what();
    return error.what();
  }
  ADD_FAILURE() << "no error was raised";
  return "";
}

std::int64_t resident_bytes(const PlacementProblem& problem, const Assignment& assignment, std::size_t device) {
  std::int64_t bytes = 0;
  for (std::size_t r = 0; r < assignment.device.size(); ++r) {
    if (assignment.resident[r] && static_cast<std::size_t>(assignment.device[r]) == device) {
      bytes += problem.regions[r].param_bytes;
    }
  }
  return bytes;
}

TEST(SearchTest, ThreadCountDoesNotChangeTheResult) {
  for (unsigned seed = 1; seed <= 30; ++seed) {
    const PlacementProblem problem = test::random_problem(4 + seed % 40, 2 + seed % 3, seed);
    SearchOptions options;
    options.threads = 1;
    const SearchResult single = search_placement(problem, options);
    options.threads = 4;
    const SearchResult parallel = search_placement(problem, options);
    EXPECT_EQ(single, parallel) << "seed " << seed;
  }
  const PlacementProblem chain = test::chain_problem(200, 4, 3);
  SearchOptions options;
  const SearchResult single = search_placement(chain, options);
  options.threads = 4;
  EXPECT_EQ(single, search_placement(chain, options));
}

TEST(SearchTest, ReturnedAssignmentsNeverExceedCapacity) {
  for (unsigned seed = 1; seed <= 40; ++seed) {
    const PlacementProblem problem = test::random_problem(10 + seed % 20, 3, seed);
    SearchOptions options;
    options.finalists = 6;
    const SearchResult result = search_placement(problem, options);
    EXPECT_EQ(result.finalists.size(), 6u) << "seed " << seed;
    for (const Assignment& finalist : result.finalists) {
      for (std::size_t d = 0; d < problem.devices.size(); ++d) {
        EXPECT_LE(resident_bytes(problem, finalist, d), problem.devices[d].capacity_bytes) << "seed " << seed;
      }
      for (std::size_t r = 0; r < finalist.device.size(); ++r) {
        EXPECT_FALSE(std::isinf(problem.regions[r].compute_s[static_cast<std::size_t>(finalist.device[r])]));
      }
    }
  }
}

TEST(SearchTest, RegionThatRunsNowhereIsRejectedByName) {
  PlacementProblem problem = test::problem_with_devices({10, 10});
  problem.regions = {region(4, {}, {1.0, 1.0}), region(5, {4}, {kCannotRun, kCannotRun})};
  const std::string message = error_of([&] { search_placement(problem, SearchOptions{}); }, ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("region 5 can run on no device"), std::string::npos) << message;
  const std::string exhaustive = error_of([&] { exhaustive_placement(problem); }, ErrorCode::InvalidArgument);
  EXPECT_NE(exhaustive.find("region 5 can run on no device"), std::string::npos) << exhaustive;
}

TEST(SearchTest, ExhaustiveRefusesTooManyPlacements) {
  // 3^14 = 4,782,969 placements; 3^13 = 1,594,323 would be accepted.
  const PlacementProblem problem = test::chain_problem(14, 3, 1);
  const std::string message = error_of([&] { exhaustive_placement(problem); }, ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("expected at most 2000000 placements, got 4782969 (14 regions on 3 devices)"),
            std::string::npos)
      << message;
}

TEST(SearchTest, RejectsBadOptions) {
  const PlacementProblem problem = test::random_problem(3, 2, 1);
  SearchOptions options;
  options.beam_width = 0;
  EXPECT_NE(error_of([&] { search_placement(problem, options); }, ErrorCode::InvalidArgument)
                .find("beam_width must be in [1, "),
            std::string::npos);
  options = SearchOptions{};
  options.threads = 0;
  EXPECT_NE(error_of([&] { search_placement(problem, options); }, ErrorCode::InvalidArgument)
                .find("threads must be in [1, 256], got 0"),
            std::string::npos);
  options = SearchOptions{};
  options.local_passes = -1;
  error_of([&] { search_placement(problem, options); }, ErrorCode::InvalidArgument);
  options = SearchOptions{};
  options.finalists = 0;
  error_of([&] { search_placement(problem, options); }, ErrorCode::InvalidArgument);
}

TEST(SearchTest, EvaluatorErrorsPropagateAndNonFiniteValuesRankLast) {
  const PlacementProblem problem = test::random_problem(12, 3, 5);
  SearchOptions options;
  options.threads = 4;
  const Evaluator throws = [](const Assignment&) -> double { throw std::runtime_error("evaluator failed"); };
  EXPECT_THROW(search_placement(problem, options, throws), std::runtime_error);

  const Evaluator never = [](const Assignment&) { return std::numeric_limits<double>::quiet_NaN(); };
  const std::string message = error_of([&] { search_placement(problem, options, never); }, ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("+inf or NaN"), std::string::npos) << message;

  // Only placements with region 0 on device 1 are acceptable to this evaluator.
  std::atomic<std::int64_t> calls{0};
  const Evaluator picky = [&](const Assignment& assignment) {
    ++calls;
    return assignment.device[0] == 1 ? evaluate_latency(problem, assignment) : std::numeric_limits<double>::infinity();
  };
  const SearchResult result = search_placement(problem, options, picky);
  EXPECT_EQ(result.evaluations, calls.load());
  for (const Assignment& finalist : result.finalists) EXPECT_EQ(finalist.device[0], 1);
}

TEST(SearchTest, EmptyProblemHasTheEmptyPlacement) {
  const PlacementProblem problem = test::problem_with_devices({0});
  const SearchResult result = search_placement(problem, SearchOptions{});
  EXPECT_EQ(result.best_value, 0.0);
  EXPECT_TRUE(result.best.device.empty());
  EXPECT_EQ(exhaustive_placement(problem).best, result.best);
}

TEST(SearchTest, ThousandRegionsOnFourDevices) {
  const PlacementProblem problem = test::chain_problem(1000, 4, 11);
  const auto started = std::chrono::steady_clock::now();
  const SearchResult result = search_placement(problem, SearchOptions{});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::cout << "[ planner  ] 1000 regions x 4 devices: " << seconds * 1e3 << " ms, " << result.evaluations
            << " evaluations, makespan " << result.best_value << " s\n";
  ASSERT_EQ(result.best.device.size(), 1000u);
  EXPECT_TRUE(feasible(problem, result.best));
  // The search must at least match the best single-device placement it starts from.
  for (std::int32_t d = 0; d < 4; ++d) {
    const Assignment uniform = assign_residency(problem, std::vector<std::int32_t>(1000, d));
    EXPECT_LE(result.best_value, evaluate_latency(problem, uniform));
  }
}

}  // namespace
}  // namespace tt
