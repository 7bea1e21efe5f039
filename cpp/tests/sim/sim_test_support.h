// Helpers shared by the simulator tests: a small machine with exact numbers and task builders.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tt/common/error.h"
#include "tt/sim/machine_model.h"
#include "tt/sim/sim_task.h"
#include "tt/sim/simulator.h"

namespace tt::test {

// Tier, device and link indices of test_machine().
constexpr std::int32_t kGpu0Tier = 0, kGpu1Tier = 1, kRamTier = 2, kDiskTier = 3;
constexpr std::int32_t kGpu0 = 0, kGpu1 = 1, kCpu = 2;
constexpr std::int32_t kRamToGpu0 = 0, kRamToGpu1 = 1, kDiskToRam = 2;

// Two GPUs, a CPU, RAM and a disk. Speeds are powers of two or round numbers so that every
// expected time in the tests is exact in binary floating point.
inline MachineModel test_machine() {
  return MachineModel(
      {{"cuda:0", 1000}, {"cuda:1", 1000}, {"ram", 10000}, {"disk", 1000000}},
      {{"cuda:0", 100.0, 50.0, kGpu0Tier}, {"cuda:1", 100.0, 50.0, kGpu1Tier}, {"cpu", 10.0, 10.0, kRamTier}},
      {{"ram->cuda:0", kRamTier, kGpu0Tier, 100.0, 0.5},
       {"ram->cuda:1", kRamTier, kGpu1Tier, 100.0, 0.5},
       {"disk->ram", kDiskTier, kRamTier, 50.0, 0.0}});
}

inline SimTask compute(std::int64_t id, std::int32_t device, double seconds, std::vector<std::int64_t> deps = {}) {
  SimTask task;
  task.id = id;
  task.kind = SimTaskKind::Compute;
  task.resource = device;
  task.seconds = seconds;
  task.deps = std::move(deps);
  task.label = "compute" + std::to_string(id);
  return task;
}

inline SimTask transfer(std::int64_t id, std::int32_t link, std::int64_t bytes, std::vector<std::int64_t> deps = {}) {
  SimTask task;
  task.id = id;
  task.kind = SimTaskKind::Transfer;
  task.resource = link;
  task.bytes = bytes;
  task.deps = std::move(deps);
  task.label = "transfer" + std::to_string(id);
  return task;
}

// `task` holding `bytes` on `tier` from its start to its end.
inline SimTask holding(SimTask task, std::int32_t tier, std::int64_t bytes) {
  task.allocate_at_start.push_back({tier, bytes});
  task.release_at_end.push_back({tier, bytes});
  return task;
}

// Simulates input that must be rejected and returns the message, checking the code.
inline std::string rejection(const std::vector<SimTask>& tasks, std::vector<std::int64_t> initial = {}) {
  try {
    simulate(test_machine(), tasks, std::move(initial));
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
    return error.what();
  }
  ADD_FAILURE() << "tasks were accepted";
  return "";
}

// `size` tasks in shuffled positions, each depending on up to three earlier ones (ids are
// creation order), spread over every device and link, each holding some bytes on a tier.
inline std::vector<SimTask> random_tasks(std::int64_t size, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<SimTask> tasks;
  tasks.reserve(static_cast<std::size_t>(size));
  for (std::int64_t id = 0; id < size; ++id) {
    std::vector<std::int64_t> deps;
    for (int k = 0; k < 3 && id > 0; ++k) {
      const std::int64_t dep = std::uniform_int_distribution<std::int64_t>(std::max<std::int64_t>(0, id - 50), id - 1)(random);
      if (std::find(deps.begin(), deps.end(), dep) == deps.end()) deps.push_back(dep);
    }
    const int resource = std::uniform_int_distribution<int>(0, 5)(random);
    SimTask task = resource < 3 ? compute(id, resource, std::uniform_int_distribution<int>(0, 8)(random) * 0.125,
                                          std::move(deps))
                                : transfer(id, resource - 3, std::uniform_int_distribution<int>(0, 400)(random),
                                           std::move(deps));
    tasks.push_back(holding(std::move(task), std::uniform_int_distribution<int>(0, 3)(random),
                            std::uniform_int_distribution<int>(0, 100)(random)));
  }
  std::shuffle(tasks.begin(), tasks.end(), random);
  return tasks;
}

}  // namespace tt::test
