// Tests of Executor: dependency order, concurrency and its cap, shared use, argument checks.
#include "tt/runtime/executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "executor_test_support.h"
#include "tt/common/error.h"

namespace tt {
namespace {

using namespace std::chrono_literals;
using namespace tt::test;

TEST(ExecutorTest, DiamondRespectsDependencies) {
  const auto schedule = std::make_shared<const Schedule>(
      std::vector<Instruction>{node(0), node(1, {0}), node(2, {0}), node(3, {1, 2})});
  Executor executor({.workers = 4});
  Stamps stamps(4);
  const RunReport report = executor.run(schedule, stamps.kernel(), {});

  EXPECT_TRUE(stamps.respects(*schedule));
  EXPECT_EQ(report.workers, 4);
  EXPECT_GT(report.wall_us, 0.0);
  ASSERT_EQ(report.records.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    const InstructionRecord& record = report.records[i];
    EXPECT_EQ(record.id, static_cast<std::int64_t>(i));
    EXPECT_EQ(record.label, "op" + std::to_string(i));
    EXPECT_EQ(record.kind, "compute");
    EXPECT_EQ(record.device, "cpu");
    EXPECT_TRUE(record.ran);
    EXPECT_GE(record.worker, 0);  // 0 is the calling thread
    EXPECT_LE(record.worker, 4);
    EXPECT_LE(record.start_us, record.end_us);
  }
  EXPECT_LE(report.records[0].end_us, report.records[3].start_us);
}

TEST(ExecutorTest, RecordsCarryKindAndPredictionOfTheirInstruction) {
  Instruction load = node(0);
  load.kind = InstructionKind::Load;
  load.region = -1;  // a load serves no region
  load.predicted_start_us = 0.0;
  load.predicted_end_us = 12.5;
  const auto schedule = std::make_shared<const Schedule>(std::vector<Instruction>{load, node(1, {0})});
  Executor executor({.workers = 1});
  std::vector<InstructionKind> kinds;
  const RunReport report =
      executor.run(schedule, [&](const Instruction& instruction) { kinds.push_back(instruction.kind); }, {});
  EXPECT_EQ(kinds, (std::vector<InstructionKind>{InstructionKind::Load, InstructionKind::Compute}));
  ASSERT_EQ(report.records.size(), 2u);
  EXPECT_EQ(report.records[0].kind, "load");
  EXPECT_EQ(report.records[0].predicted_start_us, 0.0);
  EXPECT_EQ(report.records[0].predicted_end_us, 12.5);
  EXPECT_EQ(report.records[1].kind, "compute");
  EXPECT_EQ(report.records[1].predicted_start_us, -1.0);
  EXPECT_EQ(report.records[1].predicted_end_us, -1.0);
}

TEST(ExecutorTest, RandomDagRespectsDependencies) {
  Executor executor({.workers = 4});
  for (unsigned seed = 1; seed <= 5; ++seed) {
    const auto schedule = random_dag(200, seed);
    Stamps stamps(200);
    const RunReport report = executor.run(schedule, stamps.kernel(), {});
    EXPECT_TRUE(stamps.respects(*schedule)) << "seed " << seed;
    EXPECT_TRUE(std::all_of(report.records.begin(), report.records.end(), [](const auto& r) { return r.ran; }));
  }
}

TEST(ExecutorTest, LongChainRunsInOrder) {
  Executor executor({.workers = 4});
  std::mutex mutex;
  std::vector<std::int64_t> order;
  executor.run(chain(1000), [&](const Instruction& instruction) {
    std::lock_guard lock(mutex);
    order.push_back(instruction.id);
  }, {});
  ASSERT_EQ(order.size(), 1000u);
  for (std::size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<std::int64_t>(i));
}

TEST(ExecutorTest, IndependentInstructionsRunConcurrently) {
  Executor executor({.workers = 2});
  // Each kernel waits for the other to arrive: both can only succeed if they overlap.
  std::atomic<int> arrived{0};
  Gate both_arrived;
  std::atomic<int> met{0};
  executor.run(std::make_shared<const Schedule>(std::vector<Instruction>{node(0), node(1)}),
               [&](const Instruction&) {
                 if (++arrived == 2) both_arrived.open();
                 if (both_arrived.wait()) ++met;
               },
               {});
  EXPECT_EQ(met.load(), 2);
}

TEST(ExecutorTest, MaxConcurrentCapsInstructionsInFlight) {
  Executor executor({.workers = 4});
  for (std::int32_t cap : {1, 2}) {
    const auto schedule = random_dag(60, 7);
    Stamps stamps(60);
    std::atomic<int> active{0};
    std::atomic<int> peak{0};
    const Kernel record = stamps.kernel();
    executor.run(schedule, [&](const Instruction& instruction) {
      const int now = ++active;
      int seen = peak.load();
      while (now > seen && !peak.compare_exchange_weak(seen, now)) {
      }
      record(instruction);
      std::this_thread::sleep_for(100us);  // widen the window in which an overlap would show
      --active;
    }, with_cap(cap));
    EXPECT_TRUE(stamps.respects(*schedule)) << "cap " << cap;
    EXPECT_GE(peak.load(), 1);
    EXPECT_LE(peak.load(), cap);
  }
}
TEST(ExecutorTest, ConcurrentRunsShareTheWorkers) {
  Executor executor({.workers = 4});
  const auto schedule = random_dag(30, 11);
  std::atomic<int> good_runs{0};
  std::vector<std::thread> callers;
  for (int caller = 0; caller < 8; ++caller) {
    callers.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        Stamps stamps(30);
        const RunReport report = executor.run(schedule, stamps.kernel(), {});
        const bool all_ran =
            std::all_of(report.records.begin(), report.records.end(), [](const auto& r) { return r.ran; });
        if (all_ran && report.records.size() == 30 && stamps.respects(*schedule)) ++good_runs;
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(good_runs.load(), 8 * 50);
}

TEST(ExecutorTest, EmptyScheduleGivesEmptyReport) {
  Executor executor({.workers = 1});
  const RunReport report =
      executor.run(std::make_shared<const Schedule>(std::vector<Instruction>{}), [](const Instruction&) {}, {});
  EXPECT_TRUE(report.records.empty());
  EXPECT_EQ(report.workers, 1);
}

void expect_invalid(Executor& executor, std::shared_ptr<const Schedule> schedule, Kernel kernel,
                    const RunOptions& options) {
  try {
    executor.run(std::move(schedule), std::move(kernel), options);
    ADD_FAILURE() << "run accepted bad arguments";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument) << error.what();
  }
}

TEST(ExecutorTest, RejectsBadArguments) {
  Executor executor({.workers = 1});
  const auto schedule = chain(2);
  const Kernel kernel = [](const Instruction&) {};
  for (double timeout : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    expect_invalid(executor, schedule, kernel, with_stall_timeout(timeout));
  }
  expect_invalid(executor, schedule, kernel, with_cap(-1));
  expect_invalid(executor, nullptr, kernel, {});
  expect_invalid(executor, schedule, Kernel{}, {});
}

TEST(ExecutorTest, RejectsFewerThanOneWorker) {
  for (std::int32_t workers : {0, -3}) {
    try {
      Executor executor({.workers = workers});
      ADD_FAILURE() << "executor accepted " << workers << " workers";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    }
  }
}

}  // namespace
}  // namespace tt
