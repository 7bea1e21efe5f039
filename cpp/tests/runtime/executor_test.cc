// Tests of Executor: dependency order, concurrency and its cap, errors, cancellation, stalls.
#include "tt/runtime/executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tt/common/error.h"

namespace tt {
namespace {

using namespace std::chrono_literals;

// Instruction whose region is its id, so kernels can index per-instruction arrays.
Instruction node(std::int64_t id, std::vector<std::int64_t> deps = {}) {
  Instruction instruction;
  instruction.id = id;
  instruction.region = static_cast<std::int32_t>(id);
  instruction.label = "op" + std::to_string(id);
  instruction.deps = std::move(deps);
  return instruction;
}

std::shared_ptr<const Schedule> chain(std::int64_t length) {
  std::vector<Instruction> instructions;
  for (std::int64_t id = 0; id < length; ++id) {
    instructions.push_back(id == 0 ? node(0) : node(id, {id - 1}));
  }
  return std::make_shared<const Schedule>(std::move(instructions));
}

// Each node depends on up to three random earlier ids; positions are shuffled so the
// executor cannot lean on the input already being in dependency order.
std::shared_ptr<const Schedule> random_dag(std::int64_t size, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<Instruction> instructions;
  for (std::int64_t id = 0; id < size; ++id) {
    std::vector<std::int64_t> deps;
    for (int k = 0; k < 3 && id > 0; ++k) {
      const std::int64_t dep = std::uniform_int_distribution<std::int64_t>(0, id - 1)(random);
      if (std::find(deps.begin(), deps.end(), dep) == deps.end()) deps.push_back(dep);
    }
    instructions.push_back(node(id, std::move(deps)));
  }
  std::shuffle(instructions.begin(), instructions.end(), random);
  return std::make_shared<const Schedule>(std::move(instructions));
}

// Start and end stamps from one shared counter: "a finished before b started" is then a
// comparison of stamps, with no reliance on timing.
class Stamps {
 public:
  explicit Stamps(std::size_t size) : start_(size), end_(size) {}

  Kernel kernel() {
    return [this](const Instruction& instruction) {
      start_[static_cast<std::size_t>(instruction.region)] = ++clock_;
      end_[static_cast<std::size_t>(instruction.region)] = ++clock_;
    };
  }

  // True if every instruction ran, each after all of its dependencies had finished.
  bool respects(const Schedule& schedule) const {
    for (const Instruction& instruction : schedule.instructions()) {
      const std::int64_t started = start_[static_cast<std::size_t>(instruction.region)];
      if (started == 0) return false;
      for (std::int64_t dep : instruction.deps) {
        if (end_[static_cast<std::size_t>(dep)] == 0 || end_[static_cast<std::size_t>(dep)] > started) return false;
      }
    }
    return true;
  }

 private:
  std::atomic<std::int64_t> clock_{0};
  std::vector<std::atomic<std::int64_t>> start_;
  std::vector<std::atomic<std::int64_t>> end_;
};

// Lets kernels wait for one another, with a deadline so a broken executor fails the
// test instead of hanging it.
class Gate {
 public:
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }
  bool wait() {
    std::unique_lock lock(mutex_);
    return opened_.wait_for(lock, 30s, [this] { return open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

RunOptions with_cap(std::int32_t max_concurrent) {
  RunOptions options;
  options.max_concurrent = max_concurrent;
  return options;
}

RunOptions with_stall_timeout(double seconds) {
  RunOptions options;
  options.stall_timeout_s = seconds;
  return options;
}

struct KernelFailure : std::runtime_error {
  KernelFailure(const std::string& message, int code_in) : std::runtime_error(message), code(code_in) {}
  int code;
};

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
    EXPECT_GE(record.worker, 0);
    EXPECT_LT(record.worker, 4);
    EXPECT_LE(record.start_us, record.end_us);
  }
  EXPECT_LE(report.records[0].end_us, report.records[3].start_us);
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

TEST(ExecutorTest, FirstErrorIsRethrownWithItsTypeAndStopsTheRun) {
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

TEST(ExecutorTest, QueuedInstructionsAreSkippedAfterAFailure) {
  // One worker takes the roots in order, so the second is still queued when the first fails.
  Executor executor({.workers = 1});
  std::atomic<int> others{0};
  const auto schedule = std::make_shared<const Schedule>(std::vector<Instruction>{node(0), node(1), node(2, {1})});
  EXPECT_THROW(executor.run(schedule, [&](const Instruction& instruction) {
    if (instruction.id == 0) throw KernelFailure("first", 1);
    ++others;
  }, {}), KernelFailure);
  EXPECT_EQ(others.load(), 0);
}

TEST(ExecutorTest, TwoFailuresSurfaceExactlyOneError) {
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

TEST(ExecutorTest, CancelBeforeRunCallsNoKernel) {
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

TEST(ExecutorTest, CancelMidChainStopsAndTheNextRunSucceeds) {
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
    EXPECT_STREQ(error.what(), "run cancelled before instruction op4");
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

TEST(ExecutorTest, StallWatchdogNamesTheStuckInstruction) {
  Gate release;  // declared first: the stuck kernel uses it until the executor is gone
  Executor executor({.workers = 2});
  Instruction stuck = node(0);
  stuck.label = "stuck_matmul";
  const auto schedule = std::make_shared<const Schedule>(std::vector<Instruction>{stuck, node(1, {0})});

  const auto started = std::chrono::steady_clock::now();
  try {
    executor.run(schedule, [&](const Instruction& instruction) {
      if (instruction.id == 0) release.wait();
    }, with_stall_timeout(0.2));
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
