// Names for the core's threads, so top, perf and /proc/<pid>/task/*/comm tell them apart.
#pragma once

namespace tt {

// Names the calling thread `name` (at most 15 characters are kept, Linux's limit); a
// failure to name it is ignored: the name is for people looking at the process.
void name_this_thread(const char* name) noexcept;

}  // namespace tt
