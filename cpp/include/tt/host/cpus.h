// How many CPUs this process can actually use: affinity mask, online count and cgroup quota.
#pragma once

#include <optional>

#include "tt/host/cgroup.h"
#include "tt/host/probe_roots.h"

namespace tt {

// CPU counts of this process. usable_cpus is what thread pools should be sized to.
struct CpuInfo {
  int affinity_cpus = 0;               // CPUs in this process's affinity mask
  int online_cpus = 0;                 // CPUs online on the host
  std::optional<double> quota_cores;   // cgroup CPU quota in cores, if any
  int usable_cpus = 1;                 // min(affinity_cpus, ceil(quota_cores)), at least 1
};

// min(affinity_cpus, ceil(quota_cores)), at least 1. A quota of 1.5 cores allows 2
// threads to run, each for part of the period, so it rounds up.
int usable_cpu_count(int affinity_cpus, std::optional<double> quota_cores);

// Number of CPUs in the calling process's affinity mask (sched_getaffinity), sized for
// hosts with more than CPU_SETSIZE CPUs. Throws Error(IO) with the OS reason when the kernel
// refuses, Error(ResourceExhausted) when the mask cannot be allocated.
int affinity_cpu_count();

// Affinity and online counts of the real process (not redirectable: they come from system
// calls), combined with the quota in `cgroup`. `roots` is accepted for symmetry with the
// other probes. Throws Error(IO) when the affinity mask cannot be read.
CpuInfo probe_cpus(const ProbeRoots& roots, const CgroupLimits& cgroup);

}  // namespace tt
