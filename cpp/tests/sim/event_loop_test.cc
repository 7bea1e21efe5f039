// The event loop under simulate_program(): tie-breaking among equally ready work, the
// critical chain's tie rule, memory sweeps (phases at one time, overflow), and scale.
#include "tt/sim/event_loop.h"

#include <gtest/gtest.h>

#include <chrono>
#include <limits>

#include "tt/common/error.h"

namespace tt {
namespace {

// A dag of `durations` on one queue of `capacity`, with deps per position.
TimedDag dag_of(std::vector<double> durations, std::vector<std::vector<std::size_t>> deps, std::int32_t capacity = 1) {
  TimedDag dag;
  for (const auto& row : deps) {
    dag.dep_positions.insert(dag.dep_positions.end(), row.begin(), row.end());
    dag.dep_offsets.push_back(dag.dep_positions.size());
  }
  dag.queue.assign(durations.size(), 0);
  dag.duration = std::move(durations);
  dag.capacity = {capacity};
  dag.index_successors();
  return dag;
}

TEST(EventLoopTest, AmongEquallyReadyWorkTheLowerTieRankStartsFirst) {
  TimedDag dag = dag_of({1.0, 1.0, 1.0}, {{}, {}, {}});
  Timeline plain = run_queues(dag);
  EXPECT_EQ(plain.start, (std::vector<double>{0.0, 1.0, 2.0}));  // by position
  dag.tie_rank = {2, 0, 1};
  Timeline ranked = run_queues(dag);
  EXPECT_EQ(ranked.start, (std::vector<double>{2.0, 0.0, 1.0}));
}

TEST(EventLoopTest, WorkMadeReadyAtATimeCompetesWithWorkAlreadyWaiting) {
  // 0 runs; 1 waits for the queue; 2 becomes ready when 0 ends, at the same time the slot
  // frees: 1 was ready first, so it goes first.
  const TimedDag dag = dag_of({1.0, 1.0, 1.0}, {{}, {}, {0}});
  const Timeline timeline = run_queues(dag);
  EXPECT_EQ(timeline.start, (std::vector<double>{0.0, 1.0, 2.0}));
  EXPECT_EQ(timeline.previous_in_slot[1], 0u);
}

TEST(EventLoopTest, TheCriticalChainPrefersTheLowerPositionAtATie) {
  // 0 and 1 both end at 1.0 and 2 waits for both: the chain goes back through 0.
  const TimedDag dag = dag_of({1.0, 1.0, 1.0}, {{}, {}, {0, 1}}, 2);
  const Timeline timeline = run_queues(dag);
  EXPECT_EQ(critical_chain(dag, timeline), (std::vector<std::size_t>{0, 2}));
}

TEST(EventLoopTest, SpaceFreedAtATimeIsReusableThen) {
  // A buffer released at 1.0 and another allocated at 1.0 never count together.
  std::vector<MemoryEvent> events = {
      {0.0, 2, 0, 0, 0, 100},
      {1.0, 0, 0, 0, 0, -100},
      {1.0, 2, 1, 0, 0, 100},
  };
  EXPECT_EQ(sweep_peaks(events, {0}, "test"), (std::vector<std::int64_t>{100}));
  // An instant (phase 1) counts on top of what stays, but not on top of what it replaces.
  events.push_back({1.0, 1, 2, 0, 0, 50});
  events.push_back({1.0, 1, 2, 1, 0, -50});
  EXPECT_EQ(sweep_peaks(events, {0}, "test"), (std::vector<std::int64_t>{100}));
}

TEST(EventLoopTest, AMemoryTotalOverflowingSixtyFourBitsIsRefused) {
  const std::int64_t big = std::numeric_limits<std::int64_t>::max() - 10;
  const std::vector<MemoryEvent> events = {{0.0, 2, 0, 0, 0, 100}};
  try {
    sweep_peaks(events, {big}, "test");
    FAIL() << "expected an overflow error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(error.what()).find("overflows"), std::string::npos);
  }
}

TEST(EventLoopTest, AHundredThousandPositionsRunQuickly) {
  std::vector<double> durations(100'000, 1e-3);
  std::vector<std::vector<std::size_t>> deps(durations.size());
  for (std::size_t i = 1; i < deps.size(); ++i) deps[i] = {i - 1};
  if (deps.size() > 10) deps[10].push_back(3);
  const TimedDag dag = dag_of(durations, deps, 4);
  const auto start = std::chrono::steady_clock::now();
  const Timeline timeline = run_queues(dag);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NEAR(timeline.end.back(), 100.0, 1e-6);  // a chain: each after the one before
  EXPECT_LT(seconds, 5.0);  // generous: it takes tens of milliseconds; a quadratic loop would take minutes
}

}  // namespace
}  // namespace tt
