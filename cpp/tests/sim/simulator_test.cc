// Tests of the simulator's timing: overlap, queueing, transfer costs, FIFO order, critical path.
#include "tt/sim/simulator.h"

#include <gtest/gtest.h>

#include <vector>

#include "sim_test_support.h"

namespace tt {
namespace {

using namespace tt::test;
using Ids = std::vector<std::int64_t>;

TEST(SimulatorTest, IndependentTasksOnTwoDevicesOverlap) {
  const SimResult result = simulate(test_machine(), {compute(1, kGpu0, 2.0), compute(2, kGpu1, 3.0)});
  EXPECT_EQ(result.makespan_s, 3.0);  // the max of 2 and 3, not their sum
  EXPECT_EQ(result.start_s, (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(result.end_s, (std::vector<double>{2.0, 3.0}));
}

TEST(SimulatorTest, TasksOnOneDeviceSerialize) {
  const SimResult result = simulate(test_machine(), {compute(1, kGpu0, 2.0), compute(2, kGpu0, 3.0)});
  EXPECT_EQ(result.makespan_s, 5.0);
  EXPECT_EQ(result.start_s, (std::vector<double>{0.0, 2.0}));
  EXPECT_EQ(result.critical_path, (Ids{1, 2}));  // 2 waited for the device, not for a dependency
}

TEST(SimulatorTest, DependentTaskStartsWhenItsDependencyEnds) {
  const SimResult result = simulate(test_machine(), {compute(1, kGpu0, 2.0), compute(2, kGpu1, 1.0, {1})});
  EXPECT_EQ(result.start_s[1], 2.0);
  EXPECT_EQ(result.makespan_s, 3.0);
}

TEST(SimulatorTest, TransferTimeIsLatencyPlusBytesOverBandwidth) {
  // ram->cuda:0 moves 100 B/s after 0.5 s of latency; disk->ram has no latency.
  const SimResult result = simulate(test_machine(), {transfer(1, kRamToGpu0, 200), transfer(2, kDiskToRam, 100),
                                                     transfer(3, kRamToGpu1, 0)});
  EXPECT_EQ(result.end_s, (std::vector<double>{2.5, 2.0, 0.5}));
  EXPECT_EQ(result.makespan_s, 2.5);
}

TEST(SimulatorTest, TransfersOnOneLinkSerialize) {
  const SimResult result = simulate(test_machine(), {transfer(1, kRamToGpu0, 100), transfer(2, kRamToGpu0, 100)});
  EXPECT_EQ(result.start_s, (std::vector<double>{0.0, 1.5}));
  EXPECT_EQ(result.makespan_s, 3.0);  // each pays its own latency
}

TEST(SimulatorTest, TransfersOnTwoLinksOverlap) {
  const SimResult result = simulate(test_machine(), {transfer(1, kRamToGpu0, 100), transfer(2, kRamToGpu1, 100)});
  EXPECT_EQ(result.start_s, (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(result.makespan_s, 1.5);
}

TEST(SimulatorTest, PrefetchOverlapsTransferOfNextLayerWithCompute) {
  // Three layers: load weights (1.5 s each on the link), then compute (2 s each on cuda:0).
  //   link:   T1 [0, 1.5]  T3 [1.5, 3]  T5 [3, 4.5]
  //   cuda:0:        C2 [1.5, 3.5]  C4 [3.5, 5.5]  C6 [5.5, 7.5]
  // Strictly one after the other it would take 3 * (1.5 + 2) = 10.5 s.
  const SimResult result = simulate(test_machine(), {transfer(1, kRamToGpu0, 100), compute(2, kGpu0, 2.0, {1}),
                                                     transfer(3, kRamToGpu0, 100), compute(4, kGpu0, 2.0, {2, 3}),
                                                     transfer(5, kRamToGpu0, 100), compute(6, kGpu0, 2.0, {4, 5})});
  EXPECT_EQ(result.start_s, (std::vector<double>{0.0, 1.5, 1.5, 3.5, 3.0, 5.5}));
  EXPECT_EQ(result.makespan_s, 7.5);
  EXPECT_EQ(result.critical_path, (Ids{1, 2, 4, 6}));  // the first load, then compute-bound
}

TEST(SimulatorTest, CriticalPathFollowsSlowBranchOfDiamond) {
  // 1 (1 s) fans out to 2 (5 s) and 3 (2 s, on the other device), which join in 4 (1 s).
  const SimResult result = simulate(test_machine(), {compute(1, kGpu0, 1.0), compute(2, kGpu0, 5.0, {1}),
                                                     compute(3, kGpu1, 2.0, {1}), compute(4, kGpu0, 1.0, {2, 3})});
  EXPECT_EQ(result.makespan_s, 7.0);
  EXPECT_EQ(result.critical_path, (Ids{1, 2, 4}));
}

TEST(SimulatorTest, CriticalPathTieGoesToLowerPosition) {
  // 3 waits on 1 and 2, which end together: the lower position, 1, is on the path.
  const SimResult result =
      simulate(test_machine(), {compute(1, kGpu0, 2.0), compute(2, kGpu1, 2.0), compute(3, kCpu, 1.0, {2, 1})});
  EXPECT_EQ(result.critical_path, (Ids{1, 3}));
}

TEST(SimulatorTest, QueuePicksEarliestReadyThenLowerPosition) {
  // On cuda:0: 2 and 4 are ready at 0 (2 wins: lower position) and run first; 3 becomes
  // ready at 1, after 4 did, so 4 goes before 3 despite its higher position.
  const SimResult result = simulate(test_machine(), {compute(1, kGpu1, 1.0), compute(2, kGpu0, 3.0),
                                                     compute(3, kGpu0, 1.0, {1}), compute(4, kGpu0, 1.0)});
  EXPECT_EQ(result.start_s, (std::vector<double>{0.0, 0.0, 4.0, 3.0}));
  EXPECT_EQ(result.makespan_s, 5.0);
  EXPECT_EQ(result.critical_path, (Ids{2, 4, 3}));
}

TEST(SimulatorTest, TasksReadyAtTheSameTimeCompeteOnPosition) {
  // 1 and 4 both end at 1, making 3 and 2 ready for the CPU at 1. Although 1's completion
  // is handled first, every completion at 1 is in before the CPU picks, so 2 (the lower
  // position) runs first.
  const SimResult result = simulate(test_machine(), {compute(1, kGpu0, 1.0), compute(2, kCpu, 1.0, {4}),
                                                     compute(3, kCpu, 1.0, {1}), compute(4, kGpu1, 1.0)});
  EXPECT_EQ(result.start_s, (std::vector<double>{0.0, 1.0, 2.0, 0.0}));
}

TEST(SimulatorTest, ZeroSecondTasksTakeNoTime) {
  const SimResult result =
      simulate(test_machine(), {compute(1, kGpu0, 0.0), compute(2, kGpu0, 0.0, {1}), compute(3, kGpu0, 1.0, {2})});
  EXPECT_EQ(result.start_s, (std::vector<double>{0.0, 0.0, 0.0}));
  EXPECT_EQ(result.makespan_s, 1.0);
  EXPECT_EQ(result.critical_path, (Ids{1, 2, 3}));
}

TEST(SimulatorTest, ComputeIgnoresBytesAndTransferIgnoresSeconds) {
  SimTask work = compute(1, kGpu0, 1.0);
  work.bytes = 1000;
  SimTask copy = transfer(2, kDiskToRam, 50);
  copy.seconds = 100.0;
  const SimResult result = simulate(test_machine(), {work, copy});
  EXPECT_EQ(result.end_s, (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(result.bytes_moved, (std::vector<std::int64_t>{0, 0, 50}));
}

TEST(SimulatorTest, NoTasksGiveAnEmptyResult) {
  const SimResult result = simulate(test_machine(), {});
  EXPECT_EQ(result.makespan_s, 0.0);
  EXPECT_TRUE(result.start_s.empty());
  EXPECT_TRUE(result.critical_path.empty());
  EXPECT_EQ(result.peak_bytes, (std::vector<std::int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(result.bytes_moved, (std::vector<std::int64_t>{0, 0, 0}));
}

TEST(SimulatorTest, IdenticalInputGivesIdenticalOutput) {
  const std::vector<SimTask> tasks = random_tasks(2000, 11);
  const SimResult first = simulate(test_machine(), tasks);
  const SimResult second = simulate(test_machine(), tasks);
  EXPECT_EQ(first.makespan_s, second.makespan_s);
  EXPECT_EQ(first.start_s, second.start_s);
  EXPECT_EQ(first.end_s, second.end_s);
  EXPECT_EQ(first.peak_bytes, second.peak_bytes);
  EXPECT_EQ(first.bytes_moved, second.bytes_moved);
  EXPECT_EQ(first.critical_path, second.critical_path);
  EXPECT_EQ(first.over_capacity_tiers, second.over_capacity_tiers);
}

}  // namespace
}  // namespace tt
