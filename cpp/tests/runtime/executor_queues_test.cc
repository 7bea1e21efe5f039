// Tests of per-queue capacities and asynchronous completion: caps held per queue, no thread
// held while work completes elsewhere, first error, cancellation and the watchdog across queues.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "executor_test_support.h"
#include "tt/common/error.h"
#include "tt/runtime/executor.h"

namespace tt {
namespace {

using namespace std::chrono_literals;
using namespace tt::test;

Instruction on_queue(std::int64_t id, std::int32_t queue, std::vector<std::int64_t> deps = {}) {
  Instruction instruction = node(id, std::move(deps));
  instruction.queue = queue;
  return instruction;
}

// Finishes instructions on its own thread after a delay: a stand-in for I/O completions.
class LateCompleter {
 public:
  ~LateCompleter() {
    for (std::thread& thread : threads_) thread.join();
  }
  // Runs `finish` (which calls a Completion) on a thread of its own after `delay`.
  void later(std::chrono::milliseconds delay, std::function<void()> finish) {
    std::lock_guard lock(mutex_);
    threads_.emplace_back([delay, finish = std::move(finish)] {
      std::this_thread::sleep_for(delay);
      finish();
    });
  }

 private:
  std::mutex mutex_;
  std::vector<std::thread> threads_;
};

TEST(ExecutorQueuesTest, EachQueueRunsAtMostItsCapacity) {
  std::vector<Instruction> instructions;
  for (std::int64_t id = 0; id < 12; ++id) instructions.push_back(on_queue(id, id % 3 == 0 ? 1 : 0));
  const auto schedule = std::make_shared<const Schedule>(std::move(instructions));
  Executor executor({.workers = 6});
  RunOptions options;
  options.queue_capacities = {2, 1};
  std::atomic<int> in_queue[2] = {0, 0};
  std::atomic<int> most[2] = {0, 0};
  executor.run(schedule, [&](const Instruction& instruction) {
    const int now = ++in_queue[instruction.queue];
    int seen = most[instruction.queue].load();
    while (now > seen && !most[instruction.queue].compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(5ms);
    --in_queue[instruction.queue];
  }, options);
  EXPECT_EQ(most[0].load(), 2);
  EXPECT_EQ(most[1].load(), 1);
}

TEST(ExecutorQueuesTest, AnImmediateInstructionRunsOnTheThreadThatReadiedItBeforeAnythingElse) {
  // 0 -> {1 (immediate, like a Free), 2}; 2 -> 3. Positions 1 and 2 become ready together.
  const auto schedule = std::make_shared<const Schedule>(
      std::vector<Instruction>{node(0), node(1, {0}), node(2, {0}), node(3, {2})});
  Executor executor({.workers = 2});
  RunOptions options;
  options.immediate = {false, true, false, false};
  for (int repeat = 0; repeat < 20; ++repeat) {
    std::mutex mutex;
    std::vector<std::pair<std::int64_t, std::thread::id>> ran;
    executor.run(schedule, [&](const Instruction& instruction) {
      std::lock_guard lock(mutex);
      ran.emplace_back(instruction.id, std::this_thread::get_id());
    }, options);
    ASSERT_EQ(ran.size(), 4u);
    EXPECT_EQ(ran[0].first, 0);
    EXPECT_EQ(ran[1].first, 1) << "the immediate one runs first";
    EXPECT_EQ(ran[1].second, ran[0].second) << "on the thread that readied it";
  }
  options.immediate = {true};
  EXPECT_THROW(executor.run(schedule, [](const Instruction&) {}, options), Error);
}

TEST(ExecutorQueuesTest, AnImmediateInstructionRunsOnTheThreadThatCompletesItsLastReaderAsynchronously) {
  // 0 completes later on another thread (an I/O or timer thread); 1 (immediate, like a
  // Free) runs there at once, before 2 (also made ready by 0) can start anywhere else.
  const auto schedule = std::make_shared<const Schedule>(
      std::vector<Instruction>{node(0), node(1, {0}), node(2, {0})});
  Executor executor({.workers = 2});
  RunOptions options;
  options.immediate = {false, true, false};
  for (int repeat = 0; repeat < 10; ++repeat) {
    LateCompleter completer;
    std::mutex mutex;
    std::vector<std::int64_t> order;
    std::thread::id completing, free_ran_on;
    const RunReport report = executor.run_async(schedule, [&](const Instruction& instruction, Completion done) {
      {
        std::lock_guard lock(mutex);
        order.push_back(instruction.id);
        if (instruction.id == 1) free_ran_on = std::this_thread::get_id();
      }
      if (instruction.id != 0) return done();
      completer.later(5ms, [&mutex, &completing, done] {
        {
          std::lock_guard lock(mutex);
          completing = std::this_thread::get_id();
        }
        done();
      });
    }, options);
    ASSERT_EQ(order.size(), 3u);
    EXPECT_EQ(order[1], 1) << "the free runs before what else its reader's completion made ready";
    EXPECT_EQ(free_ran_on, completing) << "on the completing thread";
    EXPECT_EQ(report.records[1].worker, executor.workers() + 1);
  }
}

TEST(ExecutorQueuesTest, RejectsUnknownQueuesAndBadCapacities) {
  Executor executor({.workers = 1});
  RunOptions options;
  options.queue_capacities = {1};
  const auto schedule = std::make_shared<const Schedule>(std::vector<Instruction>{on_queue(0, 1)});
  EXPECT_THROW(executor.run(schedule, [](const Instruction&) {}, options), Error);
  options.queue_capacities = {0, 1};
  EXPECT_THROW(executor.run(schedule, [](const Instruction&) {}, options), Error);
}

TEST(ExecutorQueuesTest, AsynchronousWorkHoldsNoThreadWhileInProgress) {
  // load (io, completes 100 ms later elsewhere) -> use; independent: compute. With no pool
  // worker free, the caller must run `compute` while the load is in progress.
  const auto schedule = std::make_shared<const Schedule>(
      std::vector<Instruction>{on_queue(0, 1), on_queue(1, 0, {0}), on_queue(2, 0)});
  Executor executor({.workers = 1});
  RunOptions options;
  options.queue_capacities = {1, 1};
  options.caller_runs = true;
  LateCompleter io;
  std::atomic<bool> load_done = false;
  std::atomic<bool> compute_ran_during_load = false;
  const RunReport report = executor.run_async(schedule, [&](const Instruction& instruction, Completion done) {
    if (instruction.id == 0) {
      io.later(100ms, [&load_done, done] {
        load_done = true;
        done();
      });
      return;
    }
    if (instruction.id == 2) compute_ran_during_load = !load_done;
    done();
  }, options);
  EXPECT_TRUE(compute_ran_during_load);
  ASSERT_EQ(report.records.size(), 3u);
  for (const InstructionRecord& record : report.records) EXPECT_TRUE(record.ran);
  EXPECT_GE(report.records[0].end_us - report.records[0].start_us, 90'000.0);  // the load's bar spans its wait
  EXPECT_GE(report.records[1].start_us, report.records[0].end_us);
}

TEST(ExecutorQueuesTest, AnAsynchronousFailureIsTheRunsErrorAndStopsItsSuccessors) {
  const auto schedule = std::make_shared<const Schedule>(
      std::vector<Instruction>{on_queue(0, 1), on_queue(1, 0, {0})});
  Executor executor({.workers = 2});
  RunOptions options;
  options.queue_capacities = {1, 2};
  LateCompleter io;
  std::atomic<bool> successor_ran = false;
  EXPECT_THROW(executor.run_async(schedule, [&](const Instruction& instruction, Completion done) {
    if (instruction.id == 0) {
      io.later(20ms, [done] { done(std::make_exception_ptr(std::runtime_error("EIO at offset 4096"))); });
      return;
    }
    successor_ran = true;
    done();
  }, options), std::runtime_error);
  EXPECT_FALSE(successor_ran);
}

TEST(ExecutorQueuesTest, CancellationWaitsForWorkInProgressThenStops) {
  const auto schedule = std::make_shared<const Schedule>(
      std::vector<Instruction>{on_queue(0, 1), on_queue(1, 0, {0})});
  Executor executor({.workers = 1});
  RunOptions options;
  options.queue_capacities = {1, 1};
  options.cancel = std::make_shared<CancelToken>();
  LateCompleter io;
  std::atomic<bool> load_completed = false;
  std::atomic<bool> successor_ran = false;
  try {
    executor.run_async(schedule, [&](const Instruction& instruction, Completion done) {
      if (instruction.id == 0) {
        options.cancel->request();  // cancelled while the load is in progress
        io.later(50ms, [&load_completed, done] {
          load_completed = true;
          done();
        });
        return;
      }
      successor_ran = true;
      done();
    }, options);
    FAIL() << "run did not throw";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Cancelled);
  }
  EXPECT_FALSE(successor_ran);
  EXPECT_TRUE(load_completed) << "run() returned while the load could still write its buffer";
}

TEST(ExecutorQueuesTest, TheWatchdogSeesAsynchronousWorkThatNeverCompletes) {
  Gate release;  // declared first: the completion thread uses it until the executor is gone
  LateCompleter io;
  Executor executor({.workers = 1});
  const auto schedule = std::make_shared<const Schedule>(std::vector<Instruction>{on_queue(0, 0)});
  RunOptions options = with_stall_timeout(0.1);
  options.queue_capacities = {1};
  try {
    executor.run_async(schedule, [&](const Instruction&, Completion done) {
      io.later(0ms, [&release, done] {
        release.wait();
        done();
      });
    }, options);
    FAIL() << "run did not throw";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Stalled);
    EXPECT_NE(std::string(error.what()).find("still running: op0"), std::string::npos) << error.what();
  }
  release.open();  // the late completion lands in a live executor, which waits for it
}

}  // namespace
}  // namespace tt
