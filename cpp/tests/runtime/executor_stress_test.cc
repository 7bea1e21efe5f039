// Stress tests of the Executor (issue 45): many tiny instructions, run again and again on
// 1, 2 and 4 workers, through the join, error and cancellation paths. The sizes are the
// issue's (10,000 instructions, 100 repetitions) divided by TT_STRESS_DIVISOR, which
// `make test` sets so the suite stays short (also under TSan); 1 runs them whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "executor_test_support.h"
#include "tt/common/error.h"
#include "tt/runtime/executor.h"

namespace tt {
namespace {

using namespace tt::test;

std::int64_t divisor() {
  const char* text = std::getenv("TT_STRESS_DIVISOR");
  const std::int64_t value = text ? std::atoll(text) : 1;
  return value >= 1 ? value : 1;
}

std::int64_t instructions() { return 10000; }
std::int64_t repetitions() { return std::max<std::int64_t>(100 / divisor(), 2); }

// Counts a kernel call from its start until it returns or throws.
class InFlight {
 public:
  explicit InFlight(std::atomic<std::int64_t>& count) : count_(count) { ++count_; }
  ~InFlight() { --count_; }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  std::atomic<std::int64_t>& count_;
};

class ExecutorStressTest : public ::testing::TestWithParam<std::int32_t> {};

// Every run of a fresh random DAG respects its dependencies and runs each instruction
// once, synchronously and asynchronously (completions from inline calls and from another
// thread); a new executor per worker count is created and joined.
TEST_P(ExecutorStressTest, RepeatedRunsRespectEveryDependency) {
  Executor executor({.workers = GetParam()});
  for (std::int64_t repetition = 0; repetition < repetitions(); ++repetition) {
    const auto schedule = random_dag(instructions(), static_cast<unsigned>(repetition));
    Stamps stamps(static_cast<std::size_t>(instructions()));
    RunReport report;
    if (repetition % 2 == 0) {
      report = executor.run(schedule, stamps.kernel(), {});
    } else {
      const Kernel stamp = stamps.kernel();
      report = executor.run_async(schedule, [&](const Instruction& instruction, Completion done) {
        stamp(instruction);
        if (instruction.id % 97 == 0) {
          std::thread([done] { done(); }).detach();  // completed later, off every worker
        } else {
          done();
        }
      }, {});
    }
    ASSERT_TRUE(stamps.respects(*schedule)) << "repetition " << repetition;
    ASSERT_EQ(report.records.size(), static_cast<std::size_t>(instructions()));
  }
}

// A thousand independent instructions that all throw: each run rethrows exactly one of
// them, every started kernel has returned by then, and the executor runs on afterwards.
// Several callers at once, on shared workers, each get their own run's error.
TEST_P(ExecutorStressTest, AThousandFailingRegionsSurfaceExactlyOneErrorPerCall) {
  Executor executor({.workers = GetParam()});
  constexpr int kCallers = 4;
  std::vector<Instruction> roots;
  for (std::int64_t id = 0; id < 1000; ++id) roots.push_back(node(id));
  const auto schedule = std::make_shared<const Schedule>(std::move(roots));
  for (std::int64_t repetition = 0; repetition < repetitions(); ++repetition) {
    std::vector<int> errors(kCallers, 0);
    std::vector<std::string> messages(kCallers);
    std::vector<std::int64_t> unfinished(kCallers, -1);
    std::vector<std::thread> callers;
    for (int caller = 0; caller < kCallers; ++caller) {
      callers.emplace_back([&, caller] {
        std::atomic<std::int64_t> in_flight{0};
        try {
          executor.run(schedule, [&](const Instruction& instruction) {
            const InFlight counted(in_flight);
            if (instruction.id % 100 == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
            throw std::runtime_error("caller " + std::to_string(caller) + " op" + std::to_string(instruction.id));
          }, {});
        } catch (const std::runtime_error& error) {
          ++errors[static_cast<std::size_t>(caller)];
          messages[static_cast<std::size_t>(caller)] = error.what();
        }
        unfinished[static_cast<std::size_t>(caller)] = in_flight.load();
      });
    }
    for (std::thread& caller : callers) caller.join();
    for (int caller = 0; caller < kCallers; ++caller) {
      const auto index = static_cast<std::size_t>(caller);
      ASSERT_EQ(errors[index], 1) << "caller " << caller << ", repetition " << repetition;
      ASSERT_EQ(messages[index].rfind("caller " + std::to_string(caller) + " op", 0), 0u) << messages[index];
      ASSERT_EQ(unfinished[index], 0);
    }
  }
  const auto after = random_dag(100, 1);
  Stamps stamps(100);
  executor.run(after, stamps.kernel(), {});
  EXPECT_TRUE(stamps.respects(*after));
}

// Cancellation before the start, from inside a kernel and from another thread mid-run:
// the run throws Cancelled, every kernel it started has returned, none starts after, and
// the next run on the same executor and token completes.
TEST_P(ExecutorStressTest, CancellationFromEveryPlaceStopsCleanlyAndTheNextRunCompletes) {
  Executor executor({.workers = GetParam()});
  const auto schedule = random_dag(instructions() / 10, 7);
  for (std::int64_t repetition = 0; repetition < repetitions(); ++repetition) {
    for (const char* where : {"before", "inside", "other thread"}) {
      const RunOptions options{.cancel = std::make_shared<CancelToken>()};
      std::atomic<std::int64_t> started{0};
      std::atomic<std::int64_t> running{0};
      std::atomic<bool> after_return{false};
      std::atomic<bool> returned{false};
      const std::string place = where;
      if (place == "before") options.cancel->request();
      std::thread canceller;
      if (place == "other thread") {
        canceller = std::thread([&] {
          while (started.load() < 50 && !returned.load()) std::this_thread::yield();
          options.cancel->request();
        });
      }
      try {
        executor.run(schedule, [&](const Instruction& instruction) {
          if (returned.load()) after_return = true;
          const InFlight counted(running);
          // Enough left to start after the request for one of them to see it.
          if (place == "inside" && ++started == 100) options.cancel->request();
          if (place != "inside") ++started;
          if (instruction.id % 50 == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
        }, options);
        returned = true;
        // Only the other thread's request may come too late: a run that finished first.
        ASSERT_EQ(place, "other thread") << "repetition " << repetition;
      } catch (const Error& error) {
        returned = true;
        ASSERT_EQ(error.code(), ErrorCode::Cancelled) << where << ": " << error.what();
      }
      if (canceller.joinable()) canceller.join();
      ASSERT_EQ(running.load(), 0) << where;
      ASSERT_FALSE(after_return.load()) << where;
      if (place == "before") {
        ASSERT_EQ(started.load(), 0);
      }
      options.cancel->consume();  // a request that came after the run ended
      Stamps stamps(static_cast<std::size_t>(schedule->instructions().size()));
      executor.run(schedule, stamps.kernel(), options);
      ASSERT_TRUE(stamps.respects(*schedule)) << where;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, ExecutorStressTest, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "Workers"; });

}  // namespace
}  // namespace tt
