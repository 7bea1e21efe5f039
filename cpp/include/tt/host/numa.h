// NUMA nodes of the host: their memory and CPUs, from sysfs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tt/host/probe_roots.h"

namespace tt {

// One NUMA node as sysfs describes it.
struct NumaNode {
  int id = 0;                       // N of nodeN
  std::int64_t mem_total_bytes = 0; // "Node N MemTotal"
  std::int64_t mem_free_bytes = 0;  // "Node N MemFree"
  std::vector<int> cpus;            // from cpulist, ascending
};

// CPU ids of a sysfs CPU list such as "0-3,8-11" or "5"; empty or whitespace-only text
// (a node without CPUs) gives an empty list. Throws Error(InvalidArgument) naming `file`
// and quoting the text when it is malformed or a range runs backwards.
std::vector<int> parse_cpu_list(std::string_view text, const std::string& file);

// Every `<sys>/devices/system/node/node<N>`, ordered by id; empty when that directory does
// not exist (kernel without NUMA). Throws Error(IO) naming a node's meminfo or cpulist
// that cannot be read, Error(InvalidArgument) naming one that is malformed.
std::vector<NumaNode> probe_numa(const ProbeRoots& roots);

}  // namespace tt
