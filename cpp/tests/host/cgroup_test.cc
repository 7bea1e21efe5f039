// Tests of the cgroup probe on fake v1 and v2 trees.
#include "tt/host/cgroup.h"

#include <gtest/gtest.h>

#include <string>

#include "fake_tree.h"
#include "tt/common/error.h"

namespace tt {
namespace {

using test::FakeTree;

// A v2 host whose process sits in /app/worker.
void make_v2(const FakeTree& tree) {
  tree.write("proc/self/cgroup", "0::/app/worker\n");
  tree.write("cgroup/cgroup.controllers", "cpu memory io\n");
  tree.make_directory("cgroup/app/worker");
}

TEST(CgroupV2Test, LimitedMemoryAndCpu) {
  FakeTree tree;
  make_v2(tree);
  tree.write("cgroup/app/worker/memory.max", "1073741824\n");
  tree.write("cgroup/app/worker/memory.current", "5000\n");
  tree.write("cgroup/app/worker/cpu.max", "150000 100000\n");
  const CgroupLimits limits = probe_cgroup(tree.roots());
  EXPECT_EQ(limits.version, 2);
  EXPECT_EQ(limits.memory_max_bytes, 1073741824);
  EXPECT_EQ(limits.memory_current_bytes, 5000);
  ASSERT_TRUE(limits.cpu_quota_cores);
  EXPECT_DOUBLE_EQ(*limits.cpu_quota_cores, 1.5);
  EXPECT_EQ(limits.memory_path, tree.path("cgroup/app/worker"));
  EXPECT_EQ(limits.cpu_path, tree.path("cgroup/app/worker"));
}

TEST(CgroupV2Test, MaxMeansUnlimited) {
  FakeTree tree;
  make_v2(tree);
  tree.write("cgroup/app/worker/memory.max", "max\n");
  tree.write("cgroup/app/worker/memory.high", "max\n");
  tree.write("cgroup/app/worker/cpu.max", "max 100000\n");
  const CgroupLimits limits = probe_cgroup(tree.roots());
  EXPECT_EQ(limits.version, 2);
  EXPECT_FALSE(limits.memory_max_bytes);
  EXPECT_FALSE(limits.memory_high_bytes);
  EXPECT_FALSE(limits.cpu_quota_cores);
}

TEST(CgroupV2Test, ReportsMemoryHighBelowMax) {
  FakeTree tree;
  make_v2(tree);
  tree.write("cgroup/app/worker/memory.max", "2000000000\n");
  tree.write("cgroup/app/worker/memory.high", "1500000000\n");
  const CgroupLimits limits = probe_cgroup(tree.roots());
  EXPECT_EQ(limits.memory_max_bytes, 2000000000);
  EXPECT_EQ(limits.memory_high_bytes, 1500000000);
}

TEST(CgroupV2Test, TighterAncestorWins) {
  FakeTree tree;
  make_v2(tree);
  tree.write("cgroup/app/worker/memory.max", "4000000000\n");
  tree.write("cgroup/app/worker/cpu.max", "400000 100000\n");
  tree.write("cgroup/app/memory.max", "1000000000\n");
  tree.write("cgroup/app/cpu.max", "50000 100000\n");
  tree.write("cgroup/app/worker/memory.current", "7\n");
  const CgroupLimits limits = probe_cgroup(tree.roots());
  EXPECT_EQ(limits.memory_max_bytes, 1000000000);
  ASSERT_TRUE(limits.cpu_quota_cores);
  EXPECT_DOUBLE_EQ(*limits.cpu_quota_cores, 0.5);
  EXPECT_EQ(limits.memory_current_bytes, 7);  // usage is the process's own cgroup's
  EXPECT_EQ(limits.memory_path, tree.path("cgroup/app/worker"));
}

TEST(CgroupV2Test, UsageAboveLimitIsReportedAsRead) {
  FakeTree tree;
  make_v2(tree);
  tree.write("cgroup/app/worker/memory.max", "1000\n");
  tree.write("cgroup/app/worker/memory.current", "5000\n");
  const CgroupLimits limits = probe_cgroup(tree.roots());
  EXPECT_EQ(limits.memory_max_bytes, 1000);
  EXPECT_EQ(limits.memory_current_bytes, 5000);
}

TEST(CgroupV2Test, ReadsTheInactiveFileCacheFromMemoryStat) {
  FakeTree tree;
  make_v2(tree);
  tree.write("cgroup/app/worker/memory.current", "9000\n");
  tree.write("cgroup/app/worker/memory.stat", "anon 1000\nfile 8000\nactive_file 2000\ninactive_file 6000\n");
  const CgroupLimits limits = probe_cgroup(tree.roots());
  EXPECT_EQ(limits.memory_inactive_file_bytes, 6000);
}

TEST(CgroupV2Test, NoMemoryStatOrNoFieldReportsNoInactiveFileCache) {
  FakeTree tree;
  make_v2(tree);
  EXPECT_FALSE(probe_cgroup(tree.roots()).memory_inactive_file_bytes);
  tree.write("cgroup/app/worker/memory.stat", "anon 1000\n");
  EXPECT_FALSE(probe_cgroup(tree.roots()).memory_inactive_file_bytes);
}

TEST(CgroupV2Test, MalformedMemoryStatNamesTheFileAndTheText) {
  FakeTree tree;
  make_v2(tree);
  tree.write("cgroup/app/worker/memory.stat", "inactive_file lots\n");
  try {
    probe_cgroup(tree.roots());
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(error.what()).find("memory.stat"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("lots"), std::string::npos);
  }
}

TEST(CgroupV2Test, HybridHostWithoutV2RootIsNotV2) {
  FakeTree tree;
  tree.write("proc/self/cgroup", "0::/\n");  // cgroup2 mounted elsewhere: no cgroup.controllers
  tree.make_directory("cgroup");
  EXPECT_EQ(probe_cgroup(tree.roots()).version, 0);
}

// A v1 host with the given cpu controller list and paths in /proc/self/cgroup.
void make_v1(const FakeTree& tree, const std::string& cpu_controllers = "cpu,cpuacct") {
  tree.write("proc/self/cgroup", "9:name=systemd:/\n4:memory:/docker/abc\n2:" + cpu_controllers +
                                     ":/docker/abc\n0::/\n");
  tree.make_directory("cgroup/memory/docker/abc");
  tree.make_directory("cgroup/" + cpu_controllers + "/docker/abc");
}

TEST(CgroupV1Test, LimitedMemoryAndCpu) {
  FakeTree tree;
  make_v1(tree);
  tree.write("cgroup/memory/docker/abc/memory.limit_in_bytes", "536870912\n");
  tree.write("cgroup/memory/docker/abc/memory.usage_in_bytes", "1234\n");
  tree.write("cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n");
  tree.write("cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  const CgroupLimits limits = probe_cgroup(tree.roots());
  EXPECT_EQ(limits.version, 1);
  EXPECT_EQ(limits.memory_max_bytes, 536870912);
  EXPECT_FALSE(limits.memory_high_bytes);
  EXPECT_EQ(limits.memory_current_bytes, 1234);
  ASSERT_TRUE(limits.cpu_quota_cores);
  EXPECT_DOUBLE_EQ(*limits.cpu_quota_cores, 2.5);
  EXPECT_EQ(limits.memory_path, tree.path("cgroup/memory/docker/abc"));
  EXPECT_EQ(limits.cpu_path, tree.path("cgroup/cpu,cpuacct/docker/abc"));
}

TEST(CgroupV1Test, PageRoundedLongMaxAndQuotaMinusOneAreUnlimited) {
  FakeTree tree;
  make_v1(tree, "cpu");
  tree.write("cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
  tree.write("cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  tree.write("cgroup/cpu/docker/abc/cpu.cfs_quota_us", "-1\n");
  tree.write("cgroup/cpu/docker/abc/cpu.cfs_period_us", "100000\n");
  const CgroupLimits limits = probe_cgroup(tree.roots());
  EXPECT_EQ(limits.version, 1);
  EXPECT_FALSE(limits.memory_max_bytes);
  EXPECT_FALSE(limits.cpu_quota_cores);
  EXPECT_EQ(limits.cpu_path, tree.path("cgroup/cpu/docker/abc"));
}

TEST(CgroupV1Test, InactiveFileCacheCountsTheDescendantsAsUsageDoes) {
  FakeTree tree;
  make_v1(tree);
  tree.write("cgroup/memory/docker/abc/memory.usage_in_bytes", "9000\n");
  tree.write("cgroup/memory/docker/abc/memory.stat", "inactive_file 10\ntotal_inactive_file 6000\n");
  EXPECT_EQ(probe_cgroup(tree.roots()).memory_inactive_file_bytes, 6000);
}

TEST(CgroupV1Test, UsageAboveLimitIsReportedAsRead) {
  FakeTree tree;
  make_v1(tree);
  tree.write("cgroup/memory/docker/abc/memory.limit_in_bytes", "4096\n");
  tree.write("cgroup/memory/docker/abc/memory.usage_in_bytes", "8192\n");
  const CgroupLimits limits = probe_cgroup(tree.roots());
  EXPECT_EQ(limits.memory_max_bytes, 4096);
  EXPECT_EQ(limits.memory_current_bytes, 8192);
}

TEST(CgroupV1Test, MissingLeafFallsBackToTheMountRoot) {
  FakeTree tree;
  // Inside a container the namespace root is mounted: /docker/abc does not exist below it.
  tree.write("proc/self/cgroup", "4:memory:/docker/abc\n1:cpu:/docker/abc\n");
  tree.write("cgroup/memory/memory.limit_in_bytes", "268435456\n");
  tree.write("cgroup/memory/memory.usage_in_bytes", "100\n");
  tree.write("cgroup/cpu/cpu.cfs_quota_us", "100000\n");
  tree.write("cgroup/cpu/cpu.cfs_period_us", "100000\n");
  const CgroupLimits limits = probe_cgroup(tree.roots());
  EXPECT_EQ(limits.version, 1);
  EXPECT_EQ(limits.memory_max_bytes, 268435456);
  EXPECT_EQ(limits.memory_current_bytes, 100);
  EXPECT_EQ(limits.cpu_quota_cores, 1.0);
  EXPECT_EQ(limits.memory_path, tree.path("cgroup/memory"));
  EXPECT_EQ(limits.cpu_path, tree.path("cgroup/cpu"));
}

TEST(CgroupV1Test, TighterAncestorWins) {
  FakeTree tree;
  make_v1(tree);
  tree.write("cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
  tree.write("cgroup/memory/docker/memory.limit_in_bytes", "1073741824\n");
  EXPECT_EQ(probe_cgroup(tree.roots()).memory_max_bytes, 1073741824);
}

void expect_invalid_naming(const FakeTree& tree, const std::string& file, const std::string& text) {
  try {
    probe_cgroup(tree.roots());
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(error.what()).find(tree.path(file)), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(text), std::string::npos) << error.what();
  }
}

TEST(CgroupErrorTest, MalformedNumbersNameTheFile) {
  {
    FakeTree tree;
    make_v2(tree);
    tree.write("cgroup/app/worker/memory.max", "12x4\n");
    expect_invalid_naming(tree, "cgroup/app/worker/memory.max", "12x4");
  }
  {
    FakeTree tree;
    make_v2(tree);
    tree.write("cgroup/app/worker/cpu.max", "150000\n");
    expect_invalid_naming(tree, "cgroup/app/worker/cpu.max", "150000");
  }
  {
    FakeTree tree;
    make_v1(tree);
    tree.write("cgroup/memory/docker/abc/memory.limit_in_bytes", "lots\n");
    expect_invalid_naming(tree, "cgroup/memory/docker/abc/memory.limit_in_bytes", "lots");
  }
  {
    FakeTree tree;
    tree.write("proc/self/cgroup", "garbage\n");
    expect_invalid_naming(tree, "proc/self/cgroup", "garbage");
  }
}

TEST(CgroupErrorTest, NoCgroupFileIsVersionZero) {
  FakeTree tree;
  tree.make_directory("proc");
  const CgroupLimits limits = probe_cgroup(tree.roots());
  EXPECT_EQ(limits.version, 0);
  EXPECT_FALSE(limits.memory_max_bytes);
  EXPECT_FALSE(limits.memory_high_bytes);
  EXPECT_FALSE(limits.memory_current_bytes);
  EXPECT_FALSE(limits.cpu_quota_cores);
  EXPECT_TRUE(limits.memory_path.empty());
  EXPECT_TRUE(limits.cpu_path.empty());
}

}  // namespace
}  // namespace tt
