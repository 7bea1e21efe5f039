// Tests of the simulator's task validation: every rejection names the offending task id.
#include "tt/sim/simulator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "sim_test_support.h"

namespace tt {
namespace {

using namespace tt::test;

TEST(SimulatorValidationTest, RejectsDuplicateIds) {
  EXPECT_EQ(rejection({compute(1, kGpu0, 1.0), compute(7, kGpu0, 1.0), compute(7, kGpu1, 1.0)}),
            "simulate: duplicate task id 7");
}

TEST(SimulatorValidationTest, AcceptsSparseAndNegativeIds) {
  // Ids far apart take the hash-map index, ids close together the flat table; both work.
  const std::int64_t far = std::numeric_limits<std::int64_t>::max();
  const SimResult sparse = simulate(test_machine(), {compute(far, kGpu0, 1.0), compute(-far, kGpu0, 1.0, {far})});
  EXPECT_EQ(sparse.critical_path, (std::vector<std::int64_t>{far, -far}));
  const SimResult dense = simulate(test_machine(), {compute(-3, kGpu0, 1.0), compute(-2, kGpu0, 1.0, {-3})});
  EXPECT_EQ(dense.makespan_s, 2.0);
  EXPECT_EQ(rejection({compute(far, kGpu0, 1.0), compute(-far, kGpu0, 1.0, {0})}),
            "simulate: task -9223372036854775807 depends on unknown task 0");
  EXPECT_EQ(rejection({compute(-3, kGpu0, 1.0), compute(-2, kGpu0, 1.0, {-4})}),
            "simulate: task -2 depends on unknown task -4");
  EXPECT_EQ(rejection({compute(far, kGpu0, 1.0), compute(far, kGpu0, 1.0)}),
            "simulate: duplicate task id 9223372036854775807");
}

TEST(SimulatorValidationTest, RejectsUnknownDependency) {
  EXPECT_EQ(rejection({compute(1, kGpu0, 1.0), compute(7, kGpu0, 1.0, {1, 9})}),
            "simulate: task 7 depends on unknown task 9");
}

TEST(SimulatorValidationTest, RejectsSelfAndRepeatedDependencies) {
  EXPECT_EQ(rejection({compute(3, kGpu0, 1.0, {3})}), "simulate: task 3 depends on itself");
  EXPECT_EQ(rejection({compute(1, kGpu0, 1.0), compute(2, kGpu0, 1.0, {1, 1})}),
            "simulate: task 2 depends on task 1 twice");
}

TEST(SimulatorValidationTest, RejectsCycleNamingItsIds) {
  EXPECT_EQ(rejection({compute(1, kGpu0, 1.0, {2}), compute(2, kGpu0, 1.0, {1})}),
            "simulate: dependency cycle 1 -> 2 -> 1");
  // 0 is fine and 4 only hangs off the cycle 1 -> 2 -> 3 -> 1; neither is named.
  EXPECT_EQ(rejection({compute(0, kGpu0, 1.0), compute(1, kGpu0, 1.0, {0, 3}), compute(2, kGpu0, 1.0, {1}),
                       transfer(3, kRamToGpu0, 8, {2}), compute(4, kGpu0, 1.0, {3})}),
            "simulate: dependency cycle 1 -> 2 -> 3 -> 1");
}

TEST(SimulatorValidationTest, RejectsResourceOutOfRangeForItsKind) {
  EXPECT_EQ(rejection({compute(4, 3, 1.0)}),
            "simulate: task 4 (compute) has resource 3, expected a device index in [0, 3)");
  EXPECT_EQ(rejection({compute(4, -1, 1.0)}),
            "simulate: task 4 (compute) has resource -1, expected a device index in [0, 3)");
  EXPECT_EQ(rejection({transfer(5, 3, 10)}),
            "simulate: task 5 (transfer) has resource 3, expected a link index in [0, 3)");
}

TEST(SimulatorValidationTest, RejectsUnknownKind) {
  SimTask task = compute(6, kGpu0, 1.0);
  task.kind = static_cast<SimTaskKind>(7);
  EXPECT_EQ(rejection({task}), "simulate: task 6 has unknown kind 7");
}

TEST(SimulatorValidationTest, RejectsNegativeOrNonFiniteSeconds) {
  EXPECT_EQ(rejection({compute(8, kGpu0, -1.0)}), "simulate: task 8 has seconds -1, expected a finite number >= 0");
  EXPECT_EQ(rejection({compute(8, kGpu0, std::nan(""))}),
            "simulate: task 8 has seconds nan, expected a finite number >= 0");
  EXPECT_EQ(rejection({compute(8, kGpu0, std::numeric_limits<double>::infinity())}),
            "simulate: task 8 has seconds inf, expected a finite number >= 0");
}

TEST(SimulatorValidationTest, RejectsNegativeBytes) {
  EXPECT_EQ(rejection({transfer(9, kRamToGpu0, -10)}), "simulate: task 9 has bytes -10, expected >= 0");
}

TEST(SimulatorValidationTest, RejectsBadMemoryEffects) {
  EXPECT_EQ(rejection({holding(compute(2, kGpu0, 1.0), 4, 10)}),
            "simulate: task 2 allocate_at_start names tier 4, expected a tier index in [0, 4)");
  SimTask release = compute(3, kGpu0, 1.0);
  release.release_at_end.push_back({-1, 10});
  EXPECT_EQ(rejection({release}), "simulate: task 3 release_at_end names tier -1, expected a tier index in [0, 4)");
  EXPECT_EQ(rejection({holding(compute(2, kGpu0, 1.0), kRamTier, -3)}),
            "simulate: task 2 allocate_at_start on tier 2 has bytes -3, expected >= 0");
}

}  // namespace
}  // namespace tt
