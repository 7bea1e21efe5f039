// The memory and CPU limits that the process's control group (v1 or v2) imposes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tt/host/probe_roots.h"

namespace tt {

// Limits found for this process. An empty optional means "no limit found" (or, for the
// current usage, "not reported"); values are as read, so usage may exceed a limit.
struct CgroupLimits {
  int version = 0;                                  // 0: no cgroup info, 1 or 2
  std::optional<std::int64_t> memory_max_bytes;     // hard limit: tightest of leaf and ancestors
  std::optional<std::int64_t> memory_high_bytes;    // v2 throttling threshold, tightest level
  std::optional<std::int64_t> memory_current_bytes; // usage of the process's own cgroup
  // Of that usage, file cache on the inactive list: the kernel reclaims it before it would
  // kill anything, so a cgroup filled to its limit by cache still has room. What is in
  // use, as container runtimes count it (the working set), is current less this.
  std::optional<std::int64_t> memory_inactive_file_bytes;
  std::optional<double> cpu_quota_cores;            // quota / period, tightest level
  std::string memory_path;                          // directory memory files were read from
  std::string cpu_path;                             // directory cpu files were read from
};

// Reads `<proc>/self/cgroup`, then the limit files under `<cgroup>`. The process's own
// directory and every ancestor up to the hierarchy root are read, keeping the smallest
// limit, since any ancestor's limit binds too; a missing file adds no limit. When the own
// directory does not exist (a container whose cgroup namespace root is mounted), the
// hierarchy root is read instead. No cgroup information at all gives version 0 and no
// limits. Throws Error(InvalidArgument) naming the file and the text for malformed
// contents, Error(IO) naming the file when one exists but cannot be read.
CgroupLimits probe_cgroup(const ProbeRoots& roots);

}  // namespace tt
