// Fork-join loop: helpers claim chunks of indices from a shared counter.
#include "tt/planner/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace tt {

void parallel_for(std::size_t count, std::int32_t threads,
                  const std::function<void(std::size_t index, std::int32_t worker)>& body) {
  const std::size_t helpers =
      std::min(count, static_cast<std::size_t>(std::max<std::int32_t>(threads, 1))) - (count > 0 ? 1 : 0);
  if (helpers == 0) {
    for (std::size_t index = 0; index < count; ++index) body(index, 0);
    return;
  }

  // Chunks amortize the counter; several per thread even out uneven work items.
  const std::size_t chunk = std::max<std::size_t>(1, count / ((helpers + 1) * 8));
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::size_t error_index = count;
  std::exception_ptr error;

  auto work = [&](std::int32_t worker) {
    while (!failed.load(std::memory_order_relaxed)) {
      const std::size_t begin = next.fetch_add(chunk, std::memory_order_relaxed);
      if (begin >= count) return;
      const std::size_t end = std::min(count, begin + chunk);
      for (std::size_t index = begin; index < end; ++index) {
        try {
          body(index, worker);
        } catch (...) {
          const std::lock_guard<std::mutex> lock(error_mutex);
          if (index < error_index) {
            error_index = index;
            error = std::current_exception();
          }
          failed.store(true, std::memory_order_relaxed);
          return;
        }
      }
    }
  };

  std::vector<std::thread> pool;
  pool.reserve(helpers);
  try {
    for (std::size_t h = 1; h <= helpers; ++h) pool.emplace_back(work, static_cast<std::int32_t>(h));
  } catch (...) {
    // Could not start a helper: the ones running and the caller still finish the work.
  }
  work(0);
  for (std::thread& thread : pool) thread.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace tt
