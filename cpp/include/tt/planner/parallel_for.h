// A fork-join loop for the planner: independent, indexed work items spread over a few threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace tt {

// Calls body(index, worker) once for every index in [0, count), on up to `threads` threads:
// the caller is worker 0 and helpers, started here and joined before returning, are
// 1..threads-1. Bodies must only write state owned by their index or their worker. When
// bodies throw, the remaining work is skipped and the exception of the lowest failing index
// is rethrown on the caller, so which error surfaces does not depend on timing.
void parallel_for(std::size_t count, std::int32_t threads,
                  const std::function<void(std::size_t index, std::int32_t worker)>& body);

}  // namespace tt
