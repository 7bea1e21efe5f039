// Tests of the simulator on 100k tasks: a chain with a hand-computable makespan and a random DAG.
#include "tt/sim/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "sim_test_support.h"

namespace tt {
namespace {

using namespace tt::test;

constexpr std::int64_t kTasks = 100000;

TEST(SimulatorScaleTest, ChainOfOneHundredThousandTasks) {
  // Alternating 0.5 s computes and 100-byte disk->ram transfers (2 s each): the sum is exact.
  std::vector<SimTask> tasks;
  tasks.reserve(kTasks);
  for (std::int64_t id = 0; id < kTasks; ++id) {
    std::vector<std::int64_t> deps;
    if (id > 0) deps.push_back(id - 1);
    tasks.push_back(id % 2 == 0 ? compute(id, kCpu, 0.5, std::move(deps))
                                : transfer(id, kDiskToRam, 100, std::move(deps)));
  }
  const SimResult result = simulate(test_machine(), tasks);
  EXPECT_EQ(result.makespan_s, (kTasks / 2) * (0.5 + 2.0));
  ASSERT_EQ(result.critical_path.size(), static_cast<std::size_t>(kTasks));
  EXPECT_EQ(result.critical_path.front(), 0);
  EXPECT_EQ(result.critical_path.back(), kTasks - 1);
  EXPECT_EQ(result.bytes_moved[kDiskToRam], (kTasks / 2) * 100);
}

TEST(SimulatorScaleTest, RandomDagOfOneHundredThousandTasksRespectsDependenciesAndQueues) {
  const std::vector<SimTask> tasks = random_tasks(kTasks, 7);
  const MachineModel machine = test_machine();
  const SimResult result = simulate(machine, tasks);
  ASSERT_EQ(result.start_s.size(), tasks.size());

  std::unordered_map<std::int64_t, std::size_t> position_of;
  for (std::size_t i = 0; i < tasks.size(); ++i) position_of[tasks[i].id] = i;
  double makespan = 0.0;
  std::vector<std::vector<std::size_t>> on_queue(machine.devices().size() + machine.links().size());
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const SimTask& task = tasks[i];
    for (std::int64_t dep : task.deps) ASSERT_GE(result.start_s[i], result.end_s[position_of[dep]]);
    const bool moves = task.kind == SimTaskKind::Transfer;
    const double duration = moves ? machine.transfer_seconds(task.resource, task.bytes) : task.seconds;
    ASSERT_EQ(result.end_s[i], result.start_s[i] + duration);
    on_queue[static_cast<std::size_t>(task.resource) + (moves ? machine.devices().size() : 0)].push_back(i);
    makespan = std::max(makespan, result.end_s[i]);
  }
  EXPECT_EQ(result.makespan_s, makespan);
  // One task at a time per device and per link.
  for (std::vector<std::size_t>& queue : on_queue) {
    std::sort(queue.begin(), queue.end(), [&](std::size_t a, std::size_t b) {
      // Zero-length tasks sort before a longer one starting with them, as they ran.
      if (result.start_s[a] != result.start_s[b]) return result.start_s[a] < result.start_s[b];
      return result.end_s[a] < result.end_s[b];
    });
    for (std::size_t k = 1; k < queue.size(); ++k) ASSERT_LE(result.end_s[queue[k - 1]], result.start_s[queue[k]]);
  }
  // The critical path ends at the makespan and each step ends where the next starts.
  ASSERT_FALSE(result.critical_path.empty());
  EXPECT_EQ(result.end_s[position_of[result.critical_path.back()]], result.makespan_s);
  EXPECT_EQ(result.start_s[position_of[result.critical_path.front()]], 0.0);
  for (std::size_t k = 1; k < result.critical_path.size(); ++k) {
    ASSERT_EQ(result.end_s[position_of[result.critical_path[k - 1]]],
              result.start_s[position_of[result.critical_path[k]]]);
  }
}

}  // namespace
}  // namespace tt
