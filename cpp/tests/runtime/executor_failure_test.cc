// Tests of Executor runs that end early: kernel errors, cancellation, the stall watchdog.
#include "tt/runtime/executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "executor_test_support.h"
#include "tt/common/error.h"

namespace tt {
namespace {

using namespace std::chrono_literals;
using namespace tt::test;

struct KernelFailure : std::runtime_error {
  KernelFailure(const std::string& message, int code_in) : std::runtime_error(message), code(code_in) {}
  int code;
};

TEST(ExecutorFailureTest, FirstErrorIsRethrownWithItsTypeAndStopsTheRun) {
  // 0 fails; 1 and 2 depend on it. 3..502 is an independent chain, slow enough that it
  // cannot plausibly finish in the moment between the failure and the run noticing it.
  constexpr std::int64_t kChainEnd = 503;
  std::vector<Instruction> instructions = {node(0), node(1, {0}), node(2, {1}), node(3)};
  for (std::int64_t id = 4; id < kChainEnd; ++id) instructions.push_back(node(id, {id - 1}));
  const auto schedule = std::make_shared<const Schedule>(std::move(instructions));

  Executor executor({.workers = 2});
  Gate chain_started;
  std::atomic<int> dependents_ran{0};
  std::atomic<int> chain_ran{0};
  try {
    executor.run(schedule, [&](const Instruction& instruction) {
      if (instruction.id == 0) {
        chain_started.wait();
        throw KernelFailure("boom", 42);
      }
      if (instruction.id < 3) {
        ++dependents_ran;
        return;
      }
      ++chain_ran;
      chain_started.open();
      std::this_thread::sleep_for(1ms);
    }, {});
    FAIL() << "run did not throw";
  } catch (const KernelFailure& failure) {
    EXPECT_STREQ(failure.what(), "boom");
    EXPECT_EQ(failure.code, 42);
  }
  EXPECT_EQ(dependents_ran.load(), 0);
  EXPECT_GE(chain_ran.load(), 1);
  EXPECT_LT(chain_ran.load(), kChainEnd - 3);
}

TEST(ExecutorFailureTest, QueuedInstructionsAreSkippedAfterAFailure) {
  // One pool worker and a caller that only waits: the worker takes the roots in order, so
  // the second is still queued when the first fails.
  Executor executor({.workers = 1});
  RunOptions options;
  options.caller_runs = false;
  std::atomic<int> others{0};
  const auto schedule = std::make_shared<const Schedule>(std::vector<Instruction>{node(0), node(1), node(2, {1})});
  EXPECT_THROW(executor.run(schedule, [&](const Instruction& instruction) {
    if (instruction.id == 0) throw KernelFailure("first", 1);
    ++others;
  }, options), KernelFailure);
  EXPECT_EQ(others.load(), 0);
}

TEST(ExecutorFailureTest, TwoFailuresSurfaceExactlyOneError) {
  Executor executor({.workers = 2});
  const auto schedule = std::make_shared<const Schedule>(std::vector<Instruction>{node(0), node(1), node(2, {0, 1})});
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::atomic<int> arrived{0};
    Gate both_arrived;
    std::atomic<int> dependent_ran{0};
    try {
      executor.run(schedule, [&](const Instruction& instruction) {
        if (instruction.id == 2) {
          ++dependent_ran;
          return;
        }
        if (++arrived == 2) both_arrived.open();
        both_arrived.wait();
        throw KernelFailure("failure " + std::to_string(instruction.id), static_cast<int>(instruction.id));
      }, {});
      FAIL() << "run did not throw";
    } catch (const KernelFailure& failure) {
      EXPECT_EQ(failure.what(), "failure " + std::to_string(failure.code));
    }
    EXPECT_EQ(dependent_ran.load(), 0);
  }
}

TEST(ExecutorFailureTest, CancelBeforeRunCallsNoKernel) {
  Executor executor({.workers = 2});
  auto token = std::make_shared<CancelToken>();
  token->request();
  std::atomic<int> calls{0};
  try {
    executor.run(chain(5), [&](const Instruction&) { ++calls; }, {.cancel = token});
    FAIL() << "run did not throw";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Cancelled);
    EXPECT_STREQ(error.what(), "run cancelled before it started");
  }
  EXPECT_EQ(calls.load(), 0);
  EXPECT_FALSE(token->pending());
}

TEST(ExecutorFailureTest, CancelMidChainStopsAndTheNextRunSucceeds) {
  Executor executor({.workers = 2});
  const RunOptions options{.cancel = std::make_shared<CancelToken>()};
  std::mutex mutex;
  std::vector<std::int64_t> ran;
  const auto kernel = [&](const Instruction& instruction) {
    std::lock_guard lock(mutex);
    ran.push_back(instruction.id);
    if (instruction.id == 3) options.cancel->request();
  };
  try {
    executor.run(chain(10), kernel, options);
    FAIL() << "run did not throw";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Cancelled);
    EXPECT_STREQ(error.what(), "run cancelled before op4");
  }
  EXPECT_EQ(ran, (std::vector<std::int64_t>{0, 1, 2, 3}));

  ran.clear();
  const RunReport report = executor.run(chain(10), [&](const Instruction& instruction) {
    std::lock_guard lock(mutex);
    ran.push_back(instruction.id);
  }, options);
  EXPECT_EQ(ran.size(), 10u);
  EXPECT_EQ(report.records.size(), 10u);
}

TEST(ExecutorFailureTest, StallWatchdogNamesTheStuckInstruction) {
  Gate release;  // declared first: the stuck kernel uses it until the executor is gone
  Executor executor({.workers = 2});
  RunOptions options = with_stall_timeout(0.2);
  options.caller_runs = false;  // the caller watches; a pool worker runs the stuck kernel
  Instruction stuck = node(0);
  stuck.label = "stuck_matmul";
  const auto schedule = std::make_shared<const Schedule>(std::vector<Instruction>{stuck, node(1, {0})});

  const auto started = std::chrono::steady_clock::now();
  try {
    executor.run(schedule, [&](const Instruction& instruction) {
      if (instruction.id == 0) release.wait();
    }, options);
    FAIL() << "run did not throw";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Stalled);
    EXPECT_STREQ(error.what(), "no instruction finished in 0.2 s; still running: stuck_matmul");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);

  // The other worker is still free; the stuck one returns once released.
  std::atomic<int> calls{0};
  executor.run(chain(3), [&](const Instruction&) { ++calls; }, {});
  EXPECT_EQ(calls.load(), 3);
  release.open();
}

TEST(ExecutorFailureTest, StallInsideACallerKernelIsReportedWhenItReturns) {
  Executor executor({.workers = 1});
  Instruction slow = node(0);
  slow.label = "slow_region";
  const auto schedule = std::make_shared<const Schedule>(std::vector<Instruction>{slow, node(1, {0})});
  bool successor_ran = false;
  try {
    executor.run(schedule, [&](const Instruction& instruction) {
      if (instruction.id == 0) std::this_thread::sleep_for(400ms);
      if (instruction.id == 1) successor_ran = true;
    }, with_stall_timeout(0.1));
    FAIL() << "run did not throw";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Stalled);
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("slow_region ran ", 0), 0u) << message;
    EXPECT_NE(message.find("the stall timeout is 0.1"), std::string::npos) << message;
  }
  EXPECT_FALSE(successor_ran);
}

}  // namespace
}  // namespace tt
