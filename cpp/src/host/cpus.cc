// CPU counts: the affinity mask, the online count and the cgroup quota, combined.
#include "tt/host/cpus.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "tt/common/error.h"

namespace tt {

int usable_cpu_count(int affinity_cpus, std::optional<double> quota_cores) {
  int usable = affinity_cpus;
  if (quota_cores && *quota_cores > 0) {
    // The epsilon keeps a quota that is whole up to rounding (2.0000000001) at 2 threads.
    const double whole = std::ceil(*quota_cores - 1e-9);
    usable = std::min(usable, static_cast<int>(std::min(whole, 1e9)));
  }
  return std::max(usable, 1);
}

int affinity_cpu_count() {
  // The fixed cpu_set_t covers 1024 CPUs; grow the mask until the kernel accepts its size.
  for (int cpus = CPU_SETSIZE;; cpus *= 2) {
    const std::size_t size = CPU_ALLOC_SIZE(cpus);
    const std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> mask(CPU_ALLOC(cpus),
                                                                [](cpu_set_t* set) { CPU_FREE(set); });
    if (!mask) {
      throw Error(ErrorCode::ResourceExhausted,
                  "sched_getaffinity: cannot allocate a mask of " + std::to_string(cpus) + " CPUs");
    }
    if (::sched_getaffinity(0, size, mask.get()) == 0) return CPU_COUNT_S(size, mask.get());
    if (errno != EINVAL || cpus >= (1 << 22)) {
      throw Error(ErrorCode::IO, std::string("sched_getaffinity of this process: ") + std::strerror(errno));
    }
  }
}

CpuInfo probe_cpus(const ProbeRoots& /*roots*/, const CgroupLimits& cgroup) {
  CpuInfo info;
  info.affinity_cpus = affinity_cpu_count();
  info.online_cpus = static_cast<int>(std::max(::sysconf(_SC_NPROCESSORS_ONLN), 1L));
  info.quota_cores = cgroup.cpu_quota_cores;
  info.usable_cpus = usable_cpu_count(info.affinity_cpus, info.quota_cores);
  return info;
}

}  // namespace tt
