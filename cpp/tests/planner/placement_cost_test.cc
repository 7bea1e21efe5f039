// Tests of the placement cost model: validation, the list-schedule latency and residency.
#include "tt/planner/placement_cost.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner_test_support.h"
#include "tt/common/error.h"

namespace tt {
namespace {

using test::kCannotRun;
using test::region;

// Two devices; moving a byte from d0 to d1 costs 0.01 s and back 0.02 s; streaming a
// parameter byte costs 0.001 s to d0 and 0.002 s to d1.
PlacementProblem two_devices() {
  PlacementProblem problem = test::problem_with_devices({1000, 1000});
  problem.transfer_s_per_byte = {{0.0, 0.01}, {0.02, 0.0}};
  problem.stream_s_per_byte = {0.001, 0.002};
  return problem;
}

Assignment assignment(std::vector<std::int32_t> devices, std::vector<bool> resident) {
  return Assignment{std::move(devices), std::move(resident)};
}

std::string rejection(const PlacementProblem& problem) {
  try {
    evaluate_latency(problem, assignment(std::vector<std::int32_t>(problem.regions.size(), 0),
                                         std::vector<bool>(problem.regions.size(), true)));
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    return error.what();
  }
  ADD_FAILURE() << "problem was accepted";
  return "";
}

TEST(PlacementCostTest, ChainPaysTransferOnlyWhereDevicesDiffer) {
  PlacementProblem problem = two_devices();
  problem.regions = {region(1, {}, {1.0, 0.5}, 100, 10), region(2, {1}, {2.0, 1.0}, 200, 20),
                     region(3, {2}, {3.0, 1.5}, 0, 5)};
  // d0 [0, 1]; 10 bytes to d1 arrive at 1.1; d1 [1.1, 2.1] then [2.1, 3.6], no transfer.
  EXPECT_DOUBLE_EQ(evaluate_latency(problem, assignment({0, 1, 1}, {true, true, true})), 3.6);
  // All on d0: no transfer at all, 1 + 2 + 3.
  EXPECT_DOUBLE_EQ(evaluate_latency(problem, assignment({0, 0, 0}, {true, true, true})), 6.0);
  // Back from d1 to d0 costs 0.02 per byte: d1 [0, 0.5], arrives 0.7, d0 [0.7, 2.7]; 20 bytes
  // to d1 at 0.01 each arrive at 2.9, d1 [2.9, 4.4].
  EXPECT_DOUBLE_EQ(evaluate_latency(problem, assignment({1, 0, 1}, {true, true, true})), 4.4);
}

TEST(PlacementCostTest, StreamsParametersThatAreNotResident) {
  PlacementProblem problem = two_devices();
  problem.regions = {region(1, {}, {1.0, 0.5}, 100, 10), region(2, {1}, {2.0, 1.0}, 200, 20),
                     region(3, {2}, {3.0, 1.5}, 0, 5)};
  // Region 2 streams 200 bytes to d1 at 0.002 s each: 0.4 s longer.
  EXPECT_DOUBLE_EQ(evaluate_latency(problem, assignment({0, 1, 1}, {true, false, true})), 4.0);
  // Region 1 streams 100 bytes to d0 at 0.001 s each: 0.1 s longer; region 3 has none.
  EXPECT_DOUBLE_EQ(evaluate_latency(problem, assignment({0, 1, 1}, {false, true, false})), 3.7);
}

TEST(PlacementCostTest, DevicesAreSerialButRunInParallelWithEachOther) {
  PlacementProblem problem = two_devices();
  problem.regions = {region(1, {}, {1.0, 1.0}, 0, 10), region(2, {}, {2.0, 1.0}, 0, 10),
                     region(3, {1, 2}, {3.0, 1.5}, 0, 0)};
  // One device: 1, then 2, then 3, although 1 and 2 are independent.
  EXPECT_DOUBLE_EQ(evaluate_latency(problem, assignment({0, 0, 0}, {true, true, true})), 6.0);
  // Independent regions overlap on two devices: d0 [0, 1] (arrives at d1 at 1.1),
  // d1 [0, 1], then region 3 on d1 [1.1, 2.6].
  EXPECT_DOUBLE_EQ(evaluate_latency(problem, assignment({0, 1, 1}, {true, true, true})), 2.6);
}

TEST(PlacementCostTest, CannotRunIsInfiniteAndInfeasible) {
  PlacementProblem problem = two_devices();
  problem.regions = {region(1, {}, {1.0, kCannotRun}), region(2, {1}, {1.0, 1.0})};
  const Assignment on_d1 = assignment({1, 1}, {true, true});
  EXPECT_EQ(evaluate_latency(problem, on_d1), kCannotRun);
  EXPECT_FALSE(feasible(problem, on_d1));
  EXPECT_TRUE(feasible(problem, assignment({0, 1}, {true, true})));
}

TEST(PlacementCostTest, FeasibleChecksResidentBytesPerDevice) {
  PlacementProblem problem = test::problem_with_devices({300, 100});
  problem.regions = {region(1, {}, {1.0, 1.0}, 200), region(2, {}, {1.0, 1.0}, 100), region(3, {}, {1.0, 1.0}, 100)};
  EXPECT_TRUE(feasible(problem, assignment({0, 0, 1}, {true, true, true})));      // 300 of 300, 100 of 100
  EXPECT_FALSE(feasible(problem, assignment({0, 0, 0}, {true, true, true})));     // 400 of 300
  EXPECT_TRUE(feasible(problem, assignment({0, 0, 0}, {true, true, false})));     // the third streams
  EXPECT_FALSE(feasible(problem, assignment({0, 1, 1}, {true, true, true})));     // 200 of 100 on d1
}

TEST(PlacementCostTest, ResidencyKeepsWhatIsCostliestToStreamAndFits) {
  PlacementProblem problem = test::problem_with_devices({250, 1000});
  problem.stream_s_per_byte = {0.001, 0.001};
  problem.regions = {region(1, {}, {1.0, 1.0}, 100), region(2, {}, {1.0, 1.0}, 200), region(3, {}, {1.0, 1.0}, 50),
                     region(4, {}, {1.0, 1.0}, 0)};
  // d0 holds 250: the 200-byte region first (most to stream), then the 100-byte one no
  // longer fits, but the 50-byte one does; a region without parameters always does.
  EXPECT_EQ(assign_residency(problem, {0, 0, 0, 0}), assignment({0, 0, 0, 0}, {false, true, true, true}));
  // Regions on d1 do not take d0's room.
  EXPECT_EQ(assign_residency(problem, {0, 1, 0, 1}), assignment({0, 1, 0, 1}, {true, true, true, true}));
  // No room at all: everything with parameters streams.
  problem.devices[0].capacity_bytes = 0;
  EXPECT_EQ(assign_residency(problem, {0, 0, 0, 0}), assignment({0, 0, 0, 0}, {false, false, false, true}));
}

TEST(PlacementCostTest, ResidencyNeverExceedsCapacity) {
  for (unsigned seed = 0; seed < 50; ++seed) {
    const PlacementProblem problem = test::random_problem(12, 3, seed);
    std::vector<std::int32_t> devices;
    for (std::size_t r = 0; r < problem.regions.size(); ++r) {
      devices.push_back(static_cast<std::int32_t>((r * 7 + seed) % 3));
    }
    const Assignment placed = assign_residency(problem, devices);
    std::vector<std::int64_t> used(3, 0);
    for (std::size_t r = 0; r < devices.size(); ++r) {
      if (placed.resident[r]) used[static_cast<std::size_t>(devices[r])] += problem.regions[r].param_bytes;
    }
    for (std::size_t d = 0; d < 3; ++d) EXPECT_LE(used[d], problem.devices[d].capacity_bytes) << "seed " << seed;
  }
}

TEST(PlacementCostTest, RejectsMalformedProblems) {
  PlacementProblem base = two_devices();
  base.regions = {region(1, {}, {1.0, 1.0}), region(2, {1}, {1.0, 1.0})};
  EXPECT_DOUBLE_EQ(evaluate_latency(base, assignment({0, 0}, {true, true})), 2.0);

  struct Case {
    void (*mutate)(PlacementProblem&);
    const char* expected;
  };
  const Case cases[] = {
      {[](PlacementProblem& p) { p.devices.clear(); }, "expected at least one device, got 0"},
      {[](PlacementProblem& p) { p.devices[1].name = "d0"; }, "device name 'd0' is used twice"},
      {[](PlacementProblem& p) { p.devices[0].capacity_bytes = -1; }, "'d0' capacity_bytes must be >= 0, got -1"},
      {[](PlacementProblem& p) { p.transfer_s_per_byte.pop_back(); }, "transfer_s_per_byte must have 2 rows"},
      {[](PlacementProblem& p) { p.transfer_s_per_byte[0][1] = -0.5; }, "transfer_s_per_byte[0][1] must be finite"},
      {[](PlacementProblem& p) { p.transfer_s_per_byte[1][1] = 0.5; }, "is on the diagonal and must be 0"},
      {[](PlacementProblem& p) { p.stream_s_per_byte = {0.1}; }, "stream_s_per_byte must have 2 entries"},
      {[](PlacementProblem& p) { p.stream_s_per_byte[1] = kCannotRun; }, "for device 'd1' must be finite"},
      {[](PlacementProblem& p) { p.regions[0].compute_s = {1.0}; }, "region 1 compute_s must have 2 entries"},
      {[](PlacementProblem& p) { p.regions[0].compute_s[1] = -1.0; }, "region 1 compute_s on device 'd1' must be >= 0"},
      {[](PlacementProblem& p) { p.regions[1].param_bytes = -5; }, "region 2 param_bytes must be >= 0, got -5"},
      {[](PlacementProblem& p) { p.regions[1].output_bytes = -5; }, "region 2 output_bytes must be >= 0, got -5"},
      {[](PlacementProblem& p) { p.regions[1].id = 1; p.regions[1].deps.clear(); }, "duplicate region id 1"},
      {[](PlacementProblem& p) { p.regions[1].deps = {2}; }, "region 2 depends on itself"},
      {[](PlacementProblem& p) { p.regions[1].deps = {1, 1}; }, "region 2 depends on region 1 twice"},
      {[](PlacementProblem& p) { p.regions[1].deps = {9}; }, "region 2 depends on region 9, which does not exist"},
      {[](PlacementProblem& p) { p.regions[0].deps = {2}; p.regions[1].deps.clear(); },
       "region 1 depends on region 2, which is listed after it"},
  };
  for (const Case& c : cases) {
    PlacementProblem problem = base;
    c.mutate(problem);
    EXPECT_NE(rejection(problem).find(c.expected), std::string::npos) << "expected: " << c.expected;
  }
}

TEST(PlacementCostTest, RejectsAssignmentsThatDoNotFit) {
  PlacementProblem problem = two_devices();
  problem.regions = {region(1, {}, {1.0, 1.0}), region(2, {1}, {1.0, 1.0})};
  try {
    evaluate_latency(problem, assignment({0}, {true}));
    ADD_FAILURE() << "a short assignment was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(error.what()).find("expected 2 devices and residency flags"), std::string::npos);
  }
  try {
    assign_residency(problem, {0, 2});
    ADD_FAILURE() << "an out-of-range device was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(error.what()).find("region 2 device must be in [0, 2), got 2"), std::string::npos);
  }
}

}  // namespace
}  // namespace tt
