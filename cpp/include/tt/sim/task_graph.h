// The validated, indexed form of a simulator's task list: positions, edges, resources, durations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tt/sim/event_loop.h"
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
  std::size_t size() const noexcept { return dag_.size(); }

  // Positions of the task's dependencies, in the order listed.
  std::span<const std::size_t> deps(std::size_t position) const { return dag_.deps(position); }

  // Positions of the tasks that depend on this one, ascending.
  std::span<const std::size_t> successors(std::size_t position) const { return dag_.successors(position); }

  // The task's queue: devices take slots [0, devices), links the slots after them.
  std::size_t resource_slot(std::size_t position) const { return dag_.queue[position]; }

  // Number of queues: devices plus links.
  std::size_t resource_count() const noexcept { return dag_.capacity.size(); }

  // How long the task runs once started (a Transfer's comes from its link).
  double duration(std::size_t position) const { return dag_.duration[position]; }

  // The form the event loop runs: every queue of capacity 1, ties broken by position.
  const TimedDag& dag() const noexcept { return dag_; }

 private:
  TimedDag dag_;
};

}  // namespace tt
