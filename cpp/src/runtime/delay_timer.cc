// The delay timer: a min-heap of deadlines served by one thread.
#include "tt/runtime/delay_timer.h"

#include <algorithm>
#include <utility>

#include "tt/common/thread_name.h"

namespace tt {

DelayTimer::DelayTimer()
    : thread_([this] {
        name_this_thread("tt-timer");
        loop();
      }) {}

DelayTimer::~DelayTimer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

bool DelayTimer::later(const Entry& a, const Entry& b) {
  return a.deadline > b.deadline;
}

void DelayTimer::at(Clock::time_point deadline, std::function<void()> callback) {
  {
    std::lock_guard lock(mutex_);
    heap_.push_back(Entry{deadline, std::move(callback)});
    std::push_heap(heap_.begin(), heap_.end(), later);
  }
  changed_.notify_all();
}

void DelayTimer::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (heap_.empty()) {
      if (stopping_) return;
      changed_.wait(lock);
      continue;
    }
    // Copied: waiting unlocks, and a new entry may move the heap's storage meanwhile.
    const Clock::time_point next = heap_.front().deadline;
    // At shutdown every pending callback is due: the destructor promises none is dropped.
    if (!stopping_ && Clock::now() < next) {
      changed_.wait_until(lock, next);
      continue;
    }
    std::pop_heap(heap_.begin(), heap_.end(), later);
    {
      std::function<void()> callback = std::move(heap_.back().callback);
      heap_.pop_back();
      lock.unlock();  // a callback may schedule another
      callback();
    }  // and is destroyed unlocked too: it may own the last reference to a run
    lock.lock();
  }
}

}  // namespace tt
