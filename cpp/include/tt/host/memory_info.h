// Physical memory of the host as the kernel reports it in /proc/meminfo.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "tt/host/probe_roots.h"

namespace tt {

// Host-wide memory in bytes; cgroup limits are separate (CgroupLimits).
struct MemoryInfo {
  std::int64_t total_bytes = 0;      // MemTotal
  std::int64_t available_bytes = 0;  // MemAvailable, or its estimate
  bool available_estimated = false;  // true: MemFree + Buffers + Cached (kernel without MemAvailable)
  // The kernel's transparent huge page mode ("always", "madvise" or "never"; empty where the
  // kernel has none). The core's large arenas ask for huge pages (AlignedBuffer): under
  // "never", O_DIRECT reads into them reach the disk in smaller requests.
  std::string transparent_huge_pages;
};

// The selected mode of a transparent_hugepage/enabled file ("always [madvise] never" ->
// "madvise"); empty when no word is bracketed.
std::string parse_selected_mode(std::string_view text);

// Fields of a meminfo file ("MemTotal:  123 kB", or "Node 0 MemTotal:  123 kB" in a NUMA
// node's file) by name, in bytes: "kB" values are multiplied by 1024, unitless ones kept.
// Throws Error(InvalidArgument) naming `file` and the line when a value is not a number.
std::map<std::string, std::int64_t, std::less<>> parse_meminfo(std::string_view text,
                                                               const std::string& file);

// Reads `<proc>/meminfo` and, where it exists, `<sys>/kernel/mm/transparent_hugepage/enabled`.
// Throws Error(IO) naming the file when it cannot be read and
// Error(InvalidArgument) naming it when MemTotal (or every source of available memory)
// is missing.
MemoryInfo probe_memory(const ProbeRoots& roots);

}  // namespace tt
