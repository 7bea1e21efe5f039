// Tests of the delay timer: callbacks run at their deadlines in deadline order, may schedule
// more, and none is dropped when the timer is destroyed.
#include "tt/runtime/delay_timer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace tt {
namespace {

using Clock = DelayTimer::Clock;
using std::chrono::milliseconds;

// Counts callbacks and lets the test wait for a number of them, with a deadline so a
// broken timer fails the test instead of hanging it.
class Tally {
 public:
  void add(int value) {
    {
      std::lock_guard lock(mutex_);
      values_.push_back(value);
      times_.push_back(Clock::now());
    }
    changed_.notify_all();
  }
  bool wait_for(std::size_t count) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(30), [&] { return values_.size() >= count; });
  }
  std::vector<int> values() {
    std::lock_guard lock(mutex_);
    return values_;
  }
  std::vector<Clock::time_point> times() {
    std::lock_guard lock(mutex_);
    return times_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int> values_;
  std::vector<Clock::time_point> times_;
};

TEST(DelayTimerTest, CallbacksRunAtTheirDeadlinesInDeadlineOrder) {
  Tally tally;
  DelayTimer timer;
  const Clock::time_point now = Clock::now();
  const std::vector<Clock::time_point> deadlines = {now + milliseconds(30), now + milliseconds(10),
                                                    now + milliseconds(20), now - milliseconds(5)};
  for (int i = 0; i < 4; ++i) timer.at(deadlines[i], [&tally, i] { tally.add(i); });
  ASSERT_TRUE(tally.wait_for(4));
  EXPECT_EQ(tally.values(), (std::vector<int>{3, 1, 2, 0}));
  const auto times = tally.times();
  for (int k = 0; k < 4; ++k) EXPECT_GE(times[k], deadlines[tally.values()[k]]) << k;
}

TEST(DelayTimerTest, EntriesAddedWhileItWaitsAreKept) {
  Tally tally;
  DelayTimer timer;
  const Clock::time_point now = Clock::now();
  timer.at(now + milliseconds(20), [&] { tally.add(0); });
  std::this_thread::sleep_for(milliseconds(1));  // the timer waits for the first deadline meanwhile
  for (int i = 1; i <= 100; ++i) timer.at(now + milliseconds(10), [&tally, i] { tally.add(i); });
  ASSERT_TRUE(tally.wait_for(101));
  EXPECT_EQ(tally.values().back(), 0);
}

TEST(DelayTimerTest, ACallbackMayScheduleAnother) {
  Tally tally;
  DelayTimer timer;
  timer.at(Clock::now(), [&] {
    tally.add(0);
    timer.at(Clock::now() + milliseconds(1), [&] { tally.add(1); });
  });
  ASSERT_TRUE(tally.wait_for(2));
  EXPECT_EQ(tally.values(), (std::vector<int>{0, 1}));
}

TEST(DelayTimerTest, TheDestructorRunsPendingCallbacksAtOnce) {
  Tally tally;
  const Clock::time_point start = Clock::now();
  {
    DelayTimer timer;
    timer.at(start + std::chrono::hours(1), [&] { tally.add(0); });
    timer.at(start + std::chrono::hours(2), [&] { tally.add(1); });
  }
  EXPECT_EQ(tally.values(), (std::vector<int>{0, 1}));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));  // not an hour
}

}  // namespace
}  // namespace tt
