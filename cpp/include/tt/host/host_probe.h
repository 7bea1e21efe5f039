// One snapshot of the host's resources: CPUs, memory, cgroup limits and NUMA layout.
#pragma once

#include <vector>

#include "tt/host/cgroup.h"
#include "tt/host/cpus.h"
#include "tt/host/memory_info.h"
#include "tt/host/numa.h"
#include "tt/host/probe_roots.h"

namespace tt {

// Everything probe_host found; a plain value.
struct HostProbe {
  CpuInfo cpus;
  MemoryInfo memory;
  CgroupLimits cgroup;
  std::vector<NumaNode> numa;  // empty on hosts without NUMA information
};

// Runs every probe against `roots`. Throws what the individual probes throw (Error with
// InvalidArgument for malformed files, IO for unreadable ones), naming the file.
HostProbe probe_host(const ProbeRoots& roots = {});

}  // namespace tt
