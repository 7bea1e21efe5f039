// Helpers shared by the executor test files: DAG builders, order stamps, a waitable gate.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "../common/gate.h"
#include "tt/runtime/executor.h"

namespace tt::test {

// Instruction whose region is its id, so kernels can index per-instruction arrays.
inline Instruction node(std::int64_t id, std::vector<std::int64_t> deps = {}) {
  Instruction instruction;
  instruction.id = id;
  instruction.region = static_cast<std::int32_t>(id);
  instruction.label = "op" + std::to_string(id);
  instruction.deps = std::move(deps);
  return instruction;
}

inline std::shared_ptr<const Schedule> chain(std::int64_t length) {
  std::vector<Instruction> instructions;
  for (std::int64_t id = 0; id < length; ++id) {
    instructions.push_back(id == 0 ? node(0) : node(id, {id - 1}));
  }
  return std::make_shared<const Schedule>(std::move(instructions));
}

// Each node depends on up to three random earlier ids; positions are shuffled so the
// executor cannot lean on the input already being in dependency order.
inline std::shared_ptr<const Schedule> random_dag(std::int64_t size, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<Instruction> instructions;
  for (std::int64_t id = 0; id < size; ++id) {
    std::vector<std::int64_t> deps;
    for (int k = 0; k < 3 && id > 0; ++k) {
      const std::int64_t dep = std::uniform_int_distribution<std::int64_t>(0, id - 1)(random);
      if (std::find(deps.begin(), deps.end(), dep) == deps.end()) deps.push_back(dep);
    }
    instructions.push_back(node(id, std::move(deps)));
  }
  std::shuffle(instructions.begin(), instructions.end(), random);
  return std::make_shared<const Schedule>(std::move(instructions));
}

// Start and end stamps from one shared counter: "a finished before b started" is then a
// comparison of stamps, with no reliance on timing.
class Stamps {
 public:
  explicit Stamps(std::size_t size) : start_(size), end_(size) {}

  Kernel kernel() {
    return [this](const Instruction& instruction) {
      start_[static_cast<std::size_t>(instruction.region)] = ++clock_;
      end_[static_cast<std::size_t>(instruction.region)] = ++clock_;
    };
  }

  // True if every instruction ran, each after all of its dependencies had finished.
  bool respects(const Schedule& schedule) const {
    for (const Instruction& instruction : schedule.instructions()) {
      const std::int64_t started = start_[static_cast<std::size_t>(instruction.region)];
      if (started == 0) return false;
      for (std::int64_t dep : instruction.deps) {
        if (end_[static_cast<std::size_t>(dep)] == 0 || end_[static_cast<std::size_t>(dep)] > started) return false;
      }
    }
    return true;
  }

 private:
  std::atomic<std::int64_t> clock_{0};
  std::vector<std::atomic<std::int64_t>> start_;
  std::vector<std::atomic<std::int64_t>> end_;
};


inline RunOptions with_cap(std::int32_t max_concurrent) {
  RunOptions options;
  options.max_concurrent = max_concurrent;
  return options;
}

inline RunOptions with_stall_timeout(double seconds) {
  RunOptions options;
  options.stall_timeout_s = seconds;
  return options;
}

}  // namespace tt::test
