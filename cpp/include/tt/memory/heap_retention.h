// Keeping freed heap memory for the next call instead of giving it back to the OS.
#pragma once

#include <cstdint>

namespace tt {

// glibc's malloc gives the top of its heap back to the OS once more than its trim
// threshold lies free there, and maps each block above its mmap threshold on its own,
// unmapping it when freed. Both thresholds adapt to the blocks freed so far, so whether a
// call's activations come back from the heap or are faulted in again page by page
// depends on what the process freed before: a GPT-2 forward here took 6,000 page
// faults per call (its 26 MB of logits, about 8% of its time) in one process and none
// in another. retain_freed_heap fixes both thresholds instead: blocks up to 32 MiB
// (glibc's own upper limit for the adaptive threshold) come from the heap, and free
// memory at the heap's top stays mapped while it is under `bytes` (at least 64 MiB; the
// threshold is a trigger: past it glibc gives back nearly all of it). Only memory a call
// had live stays. A process that set glibc's thresholds itself (MALLOC_TRIM_THRESHOLD_,
// MALLOC_MMAP_THRESHOLD_, GLIBC_TUNABLES) keeps its own. Under a malloc preloaded in
// glibc's place (jemalloc, tcmalloc) mallopt still succeeds and changes nothing.
struct HeapRetention {
  bool supported = false;            // false where nothing was changed: not glibc, or the process set its own
  std::int64_t trim_bytes = 0;       // glibc's trim threshold (0: not set by us)
  std::int64_t mmap_threshold = 0;   // smallest block mapped on its own (0: unsupported)
};

// Raises the retention to at least `bytes` (never below what an earlier call set: several
// programs share the process's heap); returns what is in force. Thread-safe.
HeapRetention retain_freed_heap(std::int64_t bytes);

// What retain_freed_heap has set so far in this process (all zero until it is called).
HeapRetention heap_retention();

}  // namespace tt
