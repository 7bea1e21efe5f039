// A one-shot cancellation request shared between a caller and the runs it starts.
#pragma once

#include <atomic>

namespace tt {

// Thread-safe. Owned by whoever issues requests (one per compiled module); runs borrow
// it and must not outlive it.
class CancelToken {
 public:
  // Asks the running run (or, if none is running, the next one) to stop before its next
  // instruction.
  void request() noexcept { requested_.store(true, std::memory_order_release); }

  // True if a request is pending; clears it, so exactly one run observes each request.
  bool consume() noexcept { return requested_.exchange(false, std::memory_order_acq_rel); }

  // True if a request is pending, without clearing it.
  bool pending() const noexcept { return requested_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> requested_{false};
};

}  // namespace tt
