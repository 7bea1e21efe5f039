// A gate that test threads wait at until the test opens it, for kernels and backends that must
// wait for one another. Thread-safe. The wait has a deadline, so a broken executor or engine
// fails its test instead of hanging the suite.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace tt::test {

class Gate {
 public:
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }
  // True once opened; false when 30 s passed first.
  bool wait() {
    std::unique_lock lock(mutex_);
    return opened_.wait_for(lock, std::chrono::seconds(30), [this] { return open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

}  // namespace tt::test
