// Calls callbacks at their deadlines from one thread, so that waiting for a deadline holds no other thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tt {

// One thread and a min-heap of deadlines. Callbacks run on the timer's thread, one at a
// time, in deadline order; they must not throw and should be short (an executor
// Completion), since a slow one delays the next.
class DelayTimer {
 public:
  using Clock = std::chrono::steady_clock;

  DelayTimer();
  // Calls every callback still pending at once, without waiting for its deadline, then
  // joins the thread: none is dropped.
  ~DelayTimer();
  DelayTimer(const DelayTimer&) = delete;
  DelayTimer& operator=(const DelayTimer&) = delete;

  // Calls `callback` on the timer's thread at `deadline` (as soon as possible if it has
  // passed). Thread-safe; must not be called once destruction has begun.
  void at(Clock::time_point deadline, std::function<void()> callback);

 private:
  struct Entry {
    Clock::time_point deadline;
    std::function<void()> callback;
  };
  static bool later(const Entry& a, const Entry& b);  // the heap's order: the earliest on top
  void loop();

  std::mutex mutex_;
  std::condition_variable changed_;  // a new earliest deadline, or stopping
  std::vector<Entry> heap_;          // guarded by mutex_
  bool stopping_ = false;            // guarded by mutex_
  std::thread thread_;               // last: starts once the members above exist
};

}  // namespace tt
