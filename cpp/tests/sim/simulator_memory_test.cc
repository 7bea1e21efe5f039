// Tests of the simulator's memory accounting: peaks, reuse after release, capacity, bytes moved.
#include "tt/sim/simulator.h"

#include <gtest/gtest.h>

#include <vector>

#include "sim_test_support.h"

namespace tt {
namespace {

using namespace tt::test;
using Bytes = std::vector<std::int64_t>;

TEST(SimulatorMemoryTest, AllocationsOverlappingInTimeAdd) {
  // [0, 2] holds 300 and [0, 3] holds 400 on RAM at the same time.
  const SimResult result = simulate(test_machine(), {holding(compute(1, kGpu0, 2.0), kRamTier, 300),
                                                     holding(compute(2, kGpu1, 3.0), kRamTier, 400)});
  EXPECT_EQ(result.peak_bytes, (Bytes{0, 0, 700, 0}));
}

TEST(SimulatorMemoryTest, SequentialAllocationsDoNotAdd) {
  // 1 holds 300 during [0, 2]; 3 waits for 2 and holds 400 during [3, 4].
  const SimResult result = simulate(test_machine(), {holding(compute(1, kGpu0, 2.0), kRamTier, 300),
                                                     compute(2, kGpu1, 3.0),
                                                     holding(compute(3, kGpu0, 1.0, {2}), kRamTier, 400)});
  EXPECT_EQ(result.peak_bytes, (Bytes{0, 0, 400, 0}));
}

TEST(SimulatorMemoryTest, ReleaseAfterLastReaderLetsLaterAllocationReuseTheSpace) {
  // 1 produces a 500-byte activation on cuda:0 at [0, 1]; 2 [1, 2] and 3 [1, 3] read it,
  // 3 last, so 3 releases it at 3; 2 needs 50 bytes of scratch. 4 then allocates 600.
  SimTask producer = compute(1, kGpu0, 1.0);
  producer.allocate_at_start.push_back({kGpu0Tier, 500});
  SimTask last_reader = compute(3, kGpu1, 2.0, {1});
  last_reader.release_at_end.push_back({kGpu0Tier, 500});
  const SimResult result =
      simulate(test_machine(), {producer, holding(compute(2, kGpu0, 1.0, {1}), kGpu0Tier, 50), last_reader,
                                holding(compute(4, kGpu0, 1.0, {3}), kGpu0Tier, 600)});
  EXPECT_EQ(result.start_s[3], 3.0);
  EXPECT_EQ(result.peak_bytes[kGpu0Tier], 600);  // max(500 + 50, 600), not 1100
  EXPECT_TRUE(result.over_capacity_tiers.empty());
}

TEST(SimulatorMemoryTest, ReleaseComesBeforeAllocationAtEqualTimes) {
  // 1 holds 800 on cuda:0 until 2. 3 does not depend on 1 but starts at 2 too (after 2 on
  // cuda:1) and allocates 700: the space freed at 2 is reusable at 2.
  const SimResult result = simulate(test_machine(), {holding(compute(1, kGpu0, 2.0), kGpu0Tier, 800),
                                                     compute(2, kGpu1, 2.0),
                                                     holding(compute(3, kGpu1, 1.0, {2}), kGpu0Tier, 700)});
  EXPECT_EQ(result.start_s[2], 2.0);
  EXPECT_EQ(result.peak_bytes[kGpu0Tier], 800);
  EXPECT_TRUE(result.over_capacity_tiers.empty());
}

TEST(SimulatorMemoryTest, ZeroSecondTaskFreesSpaceForAllocationsAtTheSameTime) {
  // 2 is an instant "free" of 1's 800 bytes at 1; 3 allocates 700 at 1 on another device.
  SimTask free_task = compute(2, kGpu1, 0.0, {1});
  free_task.release_at_end.push_back({kGpu0Tier, 800});
  SimTask first = compute(1, kGpu0, 1.0);
  first.allocate_at_start.push_back({kGpu0Tier, 800});
  const SimResult result =
      simulate(test_machine(), {first, free_task, holding(compute(3, kCpu, 1.0, {1}), kGpu0Tier, 700)});
  EXPECT_EQ(result.peak_bytes[kGpu0Tier], 800);
}

TEST(SimulatorMemoryTest, ZeroSecondTaskCountsItsOwnScratchForAnInstant) {
  // At 0.5, while 1 holds 500: 3 takes no time but holds 100 of scratch, so 600 for an
  // instant; 4 starts at 0.5 too and, like any allocation at a release's time, reuses the
  // scratch freed then: 600, not 700.
  const SimResult result = simulate(test_machine(), {holding(compute(1, kGpu0, 1.0), kRamTier, 500),
                                                     compute(2, kGpu1, 0.5),
                                                     holding(compute(3, kGpu1, 0.0, {2}), kRamTier, 100),
                                                     holding(compute(4, kCpu, 1.0, {2}), kRamTier, 100)});
  EXPECT_EQ(result.start_s, (std::vector<double>{0.0, 0.0, 0.5, 0.5}));
  EXPECT_EQ(result.peak_bytes[kRamTier], 600);
}

TEST(SimulatorMemoryTest, InitialBytesCountInPeaks) {
  // Weights resident before the run: 5000 on RAM, 200 on cuda:1 that nothing touches.
  const SimResult result =
      simulate(test_machine(), {holding(compute(1, kCpu, 1.0), kRamTier, 3000)}, {0, 200, 5000, 0});
  EXPECT_EQ(result.peak_bytes, (Bytes{0, 200, 8000, 0}));
}

TEST(SimulatorMemoryTest, ReleasingResidentBytesMakesRoom) {
  // 900 resident on cuda:0; 1 evicts them at its end (1), so 2 can allocate 600 at 1.
  SimTask evict = compute(1, kGpu0, 1.0);
  evict.release_at_end.push_back({kGpu0Tier, 900});
  const SimResult result =
      simulate(test_machine(), {evict, holding(compute(2, kGpu0, 1.0), kGpu0Tier, 600)}, {900, 0, 0, 0});
  EXPECT_EQ(result.peak_bytes[kGpu0Tier], 900);
  EXPECT_TRUE(result.over_capacity_tiers.empty());
}

TEST(SimulatorMemoryTest, OverCapacityTiersAreReportedNotRejected) {
  // cuda:0 (1000) gets 1200; cuda:1 (1000) exactly 1000, which fits; disk is over from the
  // start because of its initial bytes.
  const SimResult result = simulate(test_machine(),
                                    {holding(compute(1, kGpu0, 1.0), kGpu0Tier, 1200),
                                     holding(compute(2, kGpu1, 1.0), kGpu1Tier, 1000)},
                                    {0, 0, 0, 2000000});
  EXPECT_EQ(result.over_capacity_tiers, (std::vector<std::int32_t>{kGpu0Tier, kDiskTier}));
  EXPECT_EQ(result.makespan_s, 1.0);
}

TEST(SimulatorMemoryTest, BytesMovedAreSummedPerLink) {
  const SimResult result = simulate(test_machine(), {transfer(1, kRamToGpu0, 100), transfer(2, kDiskToRam, 40),
                                                     transfer(3, kRamToGpu0, 250, {1}), compute(4, kGpu0, 1.0)});
  EXPECT_EQ(result.bytes_moved, (Bytes{350, 0, 40}));
}

TEST(SimulatorMemoryTest, RejectsMalformedInitialBytes) {
  EXPECT_EQ(rejection({compute(1, kGpu0, 1.0)}, {1, 2}),
            "simulate: initial_bytes has 2 entries, expected 0 or one per tier (4)");
  EXPECT_EQ(rejection({compute(1, kGpu0, 1.0)}, {0, 0, -5, 0}),
            "simulate: initial_bytes of tier 2 is -5, expected >= 0");
}

TEST(SimulatorMemoryTest, RejectsTotalsThatOverflow) {
  SimTask huge = compute(1, kGpu0, 1.0);
  huge.allocate_at_start.push_back({kRamTier, INT64_MAX});
  huge.allocate_at_start.push_back({kRamTier, 1});
  EXPECT_EQ(rejection({huge}), "simulate: memory total of tier 2 overflows a 64-bit byte count");
}

}  // namespace
}  // namespace tt
