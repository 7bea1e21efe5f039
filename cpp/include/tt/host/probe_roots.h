// Where the host probes look for the kernel's pseudo-filesystems, so tests can point them at fake trees.
#pragma once

#include <string>

namespace tt {

// Root directories of the kernel interfaces the probes read. Defaults are the real ones;
// tests substitute directories they built, so parsing is testable without the real host.
struct ProbeRoots {
  std::string proc = "/proc";             // procfs: self/cgroup, meminfo
  std::string sys = "/sys";               // sysfs: devices/system/node
  std::string cgroup = "/sys/fs/cgroup";  // cgroup mount point (v2 root or v1 controller mounts)
};

}  // namespace tt
