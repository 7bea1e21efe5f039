// Python view of the host probes: CPUs, memory, cgroup limits, NUMA nodes and disks.
#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "repr_text.h"
#include "tt/host/disk.h"
#include "tt/host/host_probe.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tt::bindings {
namespace {

template <typename T>
std::string optional_text(const std::optional<T>& value) {
  if (!value) return "None";
  if constexpr (std::is_floating_point_v<T>) return number(*value);
  return std::to_string(*value);
}

std::string repr(const CpuInfo& c) {
  return "CpuInfo(affinity_cpus=" + std::to_string(c.affinity_cpus) + ", online_cpus=" +
         std::to_string(c.online_cpus) + ", quota_cores=" + optional_text(c.quota_cores) +
         ", usable_cpus=" + std::to_string(c.usable_cpus) + ")";
}

std::string repr(const MemoryInfo& m) {
  return "MemoryInfo(total_bytes=" + std::to_string(m.total_bytes) + ", available_bytes=" +
         std::to_string(m.available_bytes) + ", available_estimated=" +
         (m.available_estimated ? "True" : "False") + ", transparent_huge_pages='" + m.transparent_huge_pages + "')";
}

std::string repr(const CgroupLimits& g) {
  return "CgroupLimits(version=" + std::to_string(g.version) + ", memory_max_bytes=" +
         optional_text(g.memory_max_bytes) + ", memory_high_bytes=" + optional_text(g.memory_high_bytes) +
         ", memory_current_bytes=" + optional_text(g.memory_current_bytes) +
         ", memory_inactive_file_bytes=" + optional_text(g.memory_inactive_file_bytes) +
         ", cpu_quota_cores=" + optional_text(g.cpu_quota_cores) + ", memory_path='" + g.memory_path +
         "', cpu_path='" + g.cpu_path + "')";
}

std::string repr(const NumaNode& n) {
  std::string cpus;
  for (int cpu : n.cpus) cpus += (cpus.empty() ? "" : ", ") + std::to_string(cpu);
  return "NumaNode(id=" + std::to_string(n.id) + ", mem_total_bytes=" + std::to_string(n.mem_total_bytes) +
         ", mem_free_bytes=" + std::to_string(n.mem_free_bytes) + ", cpus=[" + cpus + "])";
}

std::string repr(const HostProbe& h) {
  std::string numa;
  for (const NumaNode& node : h.numa) numa += (numa.empty() ? "" : ", ") + repr(node);
  return "HostProbe(cpus=" + repr(h.cpus) + ", memory=" + repr(h.memory) + ", cgroup=" + repr(h.cgroup) +
         ", numa=[" + numa + "])";
}

std::string repr(const DiskSpace& d) {
  return "DiskSpace(free_bytes=" + std::to_string(d.free_bytes) + ", total_bytes=" +
         std::to_string(d.total_bytes) + ", in_memory=" + (d.in_memory ? "True" : "False") + ")";
}

std::string repr(const ReadBandwidth& r) {
  return "ReadBandwidth(bytes_per_second=" + number(r.bytes_per_second) + ", direct=" +
         (r.direct ? "True" : "False") + ", bytes=" + std::to_string(r.bytes) + ")";
}

template <typename T>
void add_repr(nb::class_<T>& cls) {
  cls.def("__repr__", [](const T& value) { return repr(value); });
}

}  // namespace

void bind_host(nb::module_& m) {
  // Read-only snapshots: Python consumers derive budgets from them but never edit them.
  nb::class_<CpuInfo> cpus(m, "CpuInfo");
  cpus.def_ro("affinity_cpus", &CpuInfo::affinity_cpus)
      .def_ro("online_cpus", &CpuInfo::online_cpus)
      .def_ro("quota_cores", &CpuInfo::quota_cores)
      .def_ro("usable_cpus", &CpuInfo::usable_cpus);
  add_repr(cpus);

  nb::class_<MemoryInfo> memory(m, "MemoryInfo");
  memory.def_ro("total_bytes", &MemoryInfo::total_bytes)
      .def_ro("available_bytes", &MemoryInfo::available_bytes)
      .def_ro("available_estimated", &MemoryInfo::available_estimated)
      .def_ro("transparent_huge_pages", &MemoryInfo::transparent_huge_pages);
  add_repr(memory);

  nb::class_<CgroupLimits> cgroup(m, "CgroupLimits");
  cgroup.def_ro("version", &CgroupLimits::version)
      .def_ro("memory_max_bytes", &CgroupLimits::memory_max_bytes)
      .def_ro("memory_high_bytes", &CgroupLimits::memory_high_bytes)
      .def_ro("memory_current_bytes", &CgroupLimits::memory_current_bytes)
      .def_ro("memory_inactive_file_bytes", &CgroupLimits::memory_inactive_file_bytes)
      .def_ro("cpu_quota_cores", &CgroupLimits::cpu_quota_cores)
      .def_ro("memory_path", &CgroupLimits::memory_path)
      .def_ro("cpu_path", &CgroupLimits::cpu_path);
  add_repr(cgroup);

  nb::class_<NumaNode> numa(m, "NumaNode");
  numa.def_ro("id", &NumaNode::id)
      .def_ro("mem_total_bytes", &NumaNode::mem_total_bytes)
      .def_ro("mem_free_bytes", &NumaNode::mem_free_bytes)
      .def_ro("cpus", &NumaNode::cpus);
  add_repr(numa);

  nb::class_<HostProbe> host(m, "HostProbe");
  host.def_ro("cpus", &HostProbe::cpus)
      .def_ro("memory", &HostProbe::memory)
      .def_ro("cgroup", &HostProbe::cgroup)
      .def_ro("numa", &HostProbe::numa);
  add_repr(host);

  nb::class_<DiskSpace> disk(m, "DiskSpace");
  disk.def_ro("free_bytes", &DiskSpace::free_bytes)
      .def_ro("total_bytes", &DiskSpace::total_bytes)
      .def_ro("in_memory", &DiskSpace::in_memory);
  add_repr(disk);

  nb::class_<ReadBandwidth> bandwidth(m, "ReadBandwidth");
  bandwidth.def_ro("bytes_per_second", &ReadBandwidth::bytes_per_second)
      .def_ro("direct", &ReadBandwidth::direct)
      .def_ro("bytes", &ReadBandwidth::bytes);
  add_repr(bandwidth);

  m.def("probe_host",
        [](std::string proc_root, std::string sys_root, std::string cgroup_root) {
          return probe_host(ProbeRoots{std::move(proc_root), std::move(sys_root), std::move(cgroup_root)});
        },
        "proc_root"_a = "/proc", "sys_root"_a = "/sys", "cgroup_root"_a = "/sys/fs/cgroup",
        nb::call_guard<nb::gil_scoped_release>(),
        "CPUs, memory, cgroup limits and NUMA nodes of this host; the roots redirect the probes to "
        "other trees (tests).");
  m.def("probe_disk", &probe_disk, "path"_a, nb::call_guard<nb::gil_scoped_release>(),
        "Free (for unprivileged users) and total bytes of the filesystem holding path.");
  m.def("measure_read_bandwidth", &measure_read_bandwidth, "directory"_a, "bytes"_a,
        nb::call_guard<nb::gil_scoped_release>(),
        "Writes, fsyncs and reads back (O_DIRECT where allowed) a temporary file of bytes "
        "(rounded up to 1 MiB) in directory, then removes it.");
}

}  // namespace tt::bindings
