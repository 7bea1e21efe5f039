// The validated, indexed form of a simulator's task list: positions, edges, resources, durations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tt/sim/machine_model.h"
#include "tt/sim/sim_task.h"

namespace tt {

// Everything the event loop needs, by position in the input, so it never hashes an id.
// Immutable after construction.
class SimTaskGraph {
 public:
  // Validates `tasks` against `machine`. Throws Error(InvalidArgument), naming the task id,
  // when ids repeat, a dependency is unknown, repeated or the task itself, the dependencies
  // form a cycle (the message lists its ids), the kind is unknown, the resource is out of
  // range for the kind, seconds is negative or not finite, bytes is negative, or a memory
  // effect names an unknown tier or negative bytes.
  SimTaskGraph(const MachineModel& machine, const std::vector<SimTask>& tasks);

  // Number of tasks.
  std::size_t size() const noexcept { return durations_.size(); }

  // Positions of the task's dependencies, in the order listed.
  std::span<const std::size_t> deps(std::size_t position) const {
    return {dep_positions_.data() + dep_offsets_[position], dep_offsets_[position + 1] - dep_offsets_[position]};
  }

  // Positions of the tasks that depend on this one, ascending.
  std::span<const std::size_t> successors(std::size_t position) const {
    return {successor_positions_.data() + successor_offsets_[position],
            successor_offsets_[position + 1] - successor_offsets_[position]};
  }

  // The task's queue: devices take slots [0, devices), links the slots after them.
  std::size_t resource_slot(std::size_t position) const { return resource_slots_[position]; }

  // Number of queues: devices plus links.
  std::size_t resource_count() const noexcept { return resource_count_; }

  // How long the task runs once started (a Transfer's comes from its link).
  double duration(std::size_t position) const { return durations_[position]; }

 private:
  std::vector<std::size_t> dep_offsets_;
  std::vector<std::size_t> dep_positions_;
  std::vector<std::size_t> successor_offsets_;
  std::vector<std::size_t> successor_positions_;
  std::vector<std::size_t> resource_slots_;
  std::vector<double> durations_;
  std::size_t resource_count_ = 0;
};

}  // namespace tt
