// simulate(): SimTasks on a machine model, through the shared event loop; memory effects and link traffic.
#include "tt/sim/simulator.h"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <string>

#include "tt/common/error.h"
#include "tt/sim/event_loop.h"
#include "tt/sim/task_graph.h"

namespace tt {
namespace {

[[noreturn]] void reject(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, "simulate: " + message);
}

// total + delta, rejecting overflow; `what` and `index` name the total only when it fails.
std::int64_t checked_add(std::int64_t total, std::int64_t delta, const char* what, std::int32_t index) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(total, delta, &sum)) {
    reject(std::string(what) + " " + std::to_string(index) + " overflows a 64-bit byte count");
  }
  return sum;
}

// Phases as in MemoryEvent: a task that takes no time holds its own allocations for an
// instant, between the releases and the allocations of others at that time.
std::vector<std::int64_t> peak_bytes(const std::vector<SimTask>& tasks, const Timeline& timeline,
                                     std::vector<std::int64_t> level) {
  std::vector<MemoryEvent> events;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const bool instant = timeline.start[i] == timeline.end[i];
    for (const MemoryEffect& effect : tasks[i].allocate_at_start) {
      events.push_back({timeline.start[i], instant ? 1 : 2, i, 0, effect.tier, effect.bytes});
    }
    for (const MemoryEffect& effect : tasks[i].release_at_end) {
      events.push_back({timeline.end[i], instant ? 1 : 0, i, 1, effect.tier, -effect.bytes});
    }
  }
  return sweep_peaks(std::move(events), std::move(level), "simulate");
}

}  // namespace

SimResult simulate(const MachineModel& machine, const std::vector<SimTask>& tasks,
                   std::vector<std::int64_t> initial_bytes) {
  const std::size_t tier_count = machine.tiers().size();
  if (initial_bytes.empty()) initial_bytes.assign(tier_count, 0);
  if (initial_bytes.size() != tier_count) {
    reject("initial_bytes has " + std::to_string(initial_bytes.size()) + " entries, expected 0 or one per tier (" +
           std::to_string(tier_count) + ")");
  }
  for (std::size_t tier = 0; tier < tier_count; ++tier) {
    if (initial_bytes[tier] < 0) {
      reject("initial_bytes of tier " + std::to_string(tier) + " is " + std::to_string(initial_bytes[tier]) +
             ", expected >= 0");
    }
  }

  const SimTaskGraph graph(machine, tasks);
  Timeline timeline = run_queues(graph.dag());

  SimResult result;
  for (double end : timeline.end) result.makespan_s = std::max(result.makespan_s, end);
  result.peak_bytes = peak_bytes(tasks, timeline, std::move(initial_bytes));
  result.bytes_moved.assign(machine.links().size(), 0);
  for (const SimTask& task : tasks) {
    if (task.kind != SimTaskKind::Transfer) continue;
    auto& moved = result.bytes_moved[static_cast<std::size_t>(task.resource)];
    moved = checked_add(moved, task.bytes, "bytes moved over link", task.resource);
  }
  for (std::size_t position : critical_chain(graph.dag(), timeline)) result.critical_path.push_back(tasks[position].id);
  for (std::size_t tier = 0; tier < tier_count; ++tier) {
    if (result.peak_bytes[tier] > machine.tiers()[tier].capacity_bytes) {
      result.over_capacity_tiers.push_back(static_cast<std::int32_t>(tier));
    }
  }
  result.start_s = std::move(timeline.start);
  result.end_s = std::move(timeline.end);
  return result;
}

}  // namespace tt
