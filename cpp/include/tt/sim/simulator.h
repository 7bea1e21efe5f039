// Discrete-event simulation of a task DAG on a machine model: timings, memory peaks, critical path.
#pragma once

#include <cstdint>
#include <vector>

#include "tt/sim/machine_model.h"
#include "tt/sim/sim_task.h"

namespace tt {

// What one simulation found; a plain value.
struct SimResult {
  double makespan_s = 0.0;                      // end of the last task (0 for no tasks)
  std::vector<double> start_s;                  // per task, in input order
  std::vector<double> end_s;                    // per task, in input order
  std::vector<std::int64_t> peak_bytes;         // per tier: highest running total, initial bytes included
  std::vector<std::int64_t> bytes_moved;        // per link: sum of its Transfer tasks' bytes
  std::vector<std::int64_t> critical_path;      // task ids, first to last, of the chain that set the makespan
  std::vector<std::int32_t> over_capacity_tiers;  // ascending tier indices whose peak exceeded capacity
};

// Runs `tasks` on `machine` and reports when each ran and what memory it held.
//
// Every device and every link is one queue running one task at a time. A task is ready
// when all its dependencies have finished; a free queue starts, among its ready tasks, the
// one that became ready first (ties: lower input position). A Compute lasts `seconds`, a
// Transfer its link's latency + bytes / bandwidth. allocate_at_start adds to a tier when a
// task starts and release_at_end subtracts when it ends; at equal times releases come
// first, so space freed at t is reusable at t; a task that takes no time holds its own
// allocations for an instant in between. `initial_bytes` (empty, or one entry per tier) is
// resident before the run. Exceeding a capacity is reported, not an error;
// running totals may dip below zero when a task releases initial bytes it never allocated.
//
// Throws Error(InvalidArgument) naming the task id for invalid tasks (see SimTaskGraph),
// and for a malformed `initial_bytes` or totals that overflow 64 bits. Deterministic: the
// same input gives the same output. O(n log n) in the number of tasks and memory effects.
SimResult simulate(const MachineModel& machine, const std::vector<SimTask>& tasks,
                   std::vector<std::int64_t> initial_bytes = {});

}  // namespace tt
