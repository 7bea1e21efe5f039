// The aggregate host probe: every component probe against one set of roots.
#include "tt/host/host_probe.h"

namespace tt {

HostProbe probe_host(const ProbeRoots& roots) {
  HostProbe probe;
  probe.cgroup = probe_cgroup(roots);
  // The CPU count depends on the cgroup quota, so the cgroup is probed first.
  probe.cpus = probe_cpus(roots, probe.cgroup);
  probe.memory = probe_memory(roots);
  probe.numa = probe_numa(roots);
  return probe;
}

}  // namespace tt
