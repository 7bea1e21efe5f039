// Tests of the memory, CPU and NUMA probes on fake trees, and of probe_host on this machine.
#include "tt/host/host_probe.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fake_tree.h"
#include "tt/common/error.h"

namespace tt {
namespace {

using test::FakeTree;

TEST(MemoryInfoTest, ReadsTotalAndAvailableInBytes) {
  FakeTree tree;
  tree.write("proc/meminfo",
             "MemTotal:       24684084 kB\nMemFree:        21410808 kB\nMemAvailable:   24235084 kB\n"
             "Buffers:           32032 kB\nCached:          2691004 kB\nHugePages_Total:       0\n");
  const MemoryInfo info = probe_memory(tree.roots());
  EXPECT_EQ(info.total_bytes, std::int64_t{24684084} * 1024);
  EXPECT_EQ(info.available_bytes, std::int64_t{24235084} * 1024);
  EXPECT_FALSE(info.available_estimated);
}

TEST(MemoryInfoTest, ReadsTheTransparentHugePageMode) {
  EXPECT_EQ(parse_selected_mode("always [madvise] never\n"), "madvise");
  EXPECT_EQ(parse_selected_mode("[always] madvise never"), "always");
  EXPECT_EQ(parse_selected_mode("always madvise never"), "");
  EXPECT_EQ(parse_selected_mode("[never"), "");
  FakeTree tree;
  tree.write("proc/meminfo", "MemTotal: 1000 kB\nMemAvailable: 900 kB\n");
  EXPECT_EQ(probe_memory(tree.roots()).transparent_huge_pages, "");  // a kernel without them
  tree.write("sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
  EXPECT_EQ(probe_memory(tree.roots()).transparent_huge_pages, "never");
}

TEST(MemoryInfoTest, EstimatesAvailableWithoutMemAvailable) {
  FakeTree tree;
  tree.write("proc/meminfo", "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 300 kB\n");
  const MemoryInfo info = probe_memory(tree.roots());
  EXPECT_EQ(info.total_bytes, 1000 * 1024);
  EXPECT_EQ(info.available_bytes, 420 * 1024);
  EXPECT_TRUE(info.available_estimated);
}

TEST(MemoryInfoTest, MissingOrMalformedFilesAreErrorsNamingThem) {
  FakeTree tree;
  tree.make_directory("proc");
  try {
    probe_memory(tree.roots());
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::IO);
    EXPECT_NE(std::string(error.what()).find(tree.path("proc/meminfo")), std::string::npos);
  }
  tree.write("proc/meminfo", "MemTotal: many kB\n");
  try {
    probe_memory(tree.roots());
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(error.what()).find(tree.path("proc/meminfo")), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("many"), std::string::npos);
  }
}

TEST(NumaTest, ParsesCpuLists) {
  EXPECT_EQ(parse_cpu_list("0-3,8-11\n", "f"), (std::vector<int>{0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5", "f"), (std::vector<int>{5}));
  EXPECT_EQ(parse_cpu_list("", "f"), std::vector<int>{});
  EXPECT_EQ(parse_cpu_list("\n", "f"), std::vector<int>{});
  for (const char* bad : {"3-1", "a", "1,,2", "1-", "-1"}) {
    try {
      parse_cpu_list(bad, "cpulist");
      FAIL() << "accepted '" << bad << "'";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(error.what()).find("cpulist"), std::string::npos);
    }
  }
}

TEST(NumaTest, ReadsNodesInIdOrder) {
  FakeTree tree;
  tree.write("sys/devices/system/node/node1/meminfo",
             "Node 1 MemTotal:       2000 kB\nNode 1 MemFree:         500 kB\nNode 1 MemUsed: 1500 kB\n");
  tree.write("sys/devices/system/node/node1/cpulist", "8-11\n");
  tree.write("sys/devices/system/node/node0/meminfo",
             "Node 0 MemTotal:       1000 kB\nNode 0 MemFree:         300 kB\n");
  tree.write("sys/devices/system/node/node0/cpulist", "0-3\n");
  tree.write("sys/devices/system/node/online", "0-1\n");
  const std::vector<NumaNode> nodes = probe_numa(tree.roots());
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].id, 0);
  EXPECT_EQ(nodes[0].mem_total_bytes, 1000 * 1024);
  EXPECT_EQ(nodes[0].mem_free_bytes, 300 * 1024);
  EXPECT_EQ(nodes[0].cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(nodes[1].id, 1);
  EXPECT_EQ(nodes[1].mem_total_bytes, 2000 * 1024);
  EXPECT_EQ(nodes[1].cpus, (std::vector<int>{8, 9, 10, 11}));
}

TEST(NumaTest, NoNodeDirectoryIsEmpty) {
  FakeTree tree;
  tree.make_directory("sys");
  EXPECT_TRUE(probe_numa(tree.roots()).empty());
}

TEST(CpusTest, UsableIsAffinityCappedByRoundedUpQuota) {
  EXPECT_EQ(usable_cpu_count(8, std::nullopt), 8);
  EXPECT_EQ(usable_cpu_count(8, 1.5), 2);
  EXPECT_EQ(usable_cpu_count(8, 2.0), 2);
  EXPECT_EQ(usable_cpu_count(2, 6.0), 2);
  EXPECT_EQ(usable_cpu_count(8, 0.25), 1);
  EXPECT_EQ(usable_cpu_count(0, std::nullopt), 1);
}

TEST(CpusTest, ProbeCombinesAffinityAndQuota) {
  CgroupLimits cgroup;
  cgroup.cpu_quota_cores = 0.5;
  const CpuInfo info = probe_cpus(ProbeRoots{}, cgroup);
  EXPECT_GE(info.affinity_cpus, 1);
  EXPECT_GE(info.online_cpus, 1);
  EXPECT_EQ(info.quota_cores, 0.5);
  EXPECT_EQ(info.usable_cpus, 1);
}

TEST(HostProbeTest, AggregatesAFakeTree) {
  FakeTree tree;
  tree.write("proc/meminfo", "MemTotal: 1000 kB\nMemAvailable: 800 kB\n");
  tree.write("proc/self/cgroup", "0::/job\n");
  tree.write("cgroup/cgroup.controllers", "cpu memory\n");
  tree.write("cgroup/job/memory.max", "524288\n");
  tree.write("cgroup/job/cpu.max", "300000 100000\n");
  tree.write("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal: 1000 kB\nNode 0 MemFree: 700 kB\n");
  tree.write("sys/devices/system/node/node0/cpulist", "0\n");
  const HostProbe probe = probe_host(tree.roots());
  EXPECT_EQ(probe.memory.total_bytes, 1000 * 1024);
  EXPECT_EQ(probe.cgroup.version, 2);
  EXPECT_EQ(probe.cgroup.memory_max_bytes, 524288);
  EXPECT_EQ(probe.cpus.quota_cores, 3.0);
  EXPECT_EQ(probe.cpus.usable_cpus, std::min(probe.cpus.affinity_cpus, 3));
  ASSERT_EQ(probe.numa.size(), 1u);
  EXPECT_EQ(probe.numa[0].cpus, std::vector<int>{0});
}

TEST(HostProbeTest, RunsOnThisMachine) {
  HostProbe probe;
  ASSERT_NO_THROW(probe = probe_host());
  EXPECT_GT(probe.memory.total_bytes, 0);
  EXPECT_GT(probe.memory.available_bytes, 0);
  EXPECT_GE(probe.cpus.usable_cpus, 1);
  EXPECT_LE(probe.cpus.usable_cpus, probe.cpus.affinity_cpus);
}

}  // namespace
}  // namespace tt
