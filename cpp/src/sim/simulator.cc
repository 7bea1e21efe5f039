// The event loop of the simulator: per-resource FIFO queues, memory accounting and the critical path.
#include "tt/sim/simulator.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <queue>
#include <string>

#include "tt/common/error.h"
#include "tt/sim/task_graph.h"

namespace tt {
namespace {

constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

[[noreturn]] void reject(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, "simulate: " + message);
}

// A task at a time: ready queues order by when it became ready, the completion queue by
// when it ends; ties go to the lower input position so the order depends only on the input.
struct Stamp {
  double time;
  std::size_t position;
};

struct LaterStamp {
  bool operator()(const Stamp& a, const Stamp& b) const {
    return a.time > b.time || (a.time == b.time && a.position > b.position);
  }
};

using StampHeap = std::priority_queue<Stamp, std::vector<Stamp>, LaterStamp>;

struct Timeline {
  std::vector<double> start;
  std::vector<double> end;
  std::vector<std::size_t> previous_on_resource;  // the task that ran before it on its queue
};

// Advances time from completion to completion. All completions at one time are handled
// before any queue picks its next task, so a task made ready at t competes fairly with
// the ones already waiting.
Timeline run_queues(const SimTaskGraph& graph) {
  const std::size_t n = graph.size();
  const std::size_t queues = graph.resource_count();
  Timeline timeline{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0), std::vector<std::size_t>(n, kNone)};
  std::vector<StampHeap> ready(queues);
  std::vector<std::size_t> running(queues, kNone);
  std::vector<std::size_t> last_started(queues, kNone);
  std::vector<char> touched(queues, 0);
  std::vector<std::size_t> touched_list;
  std::vector<std::size_t> remaining(n);
  StampHeap completions;
  double now = 0.0;

  auto touch = [&](std::size_t queue) {
    if (!touched[queue]) {
      touched[queue] = 1;
      touched_list.push_back(queue);
    }
  };
  auto make_ready = [&](std::size_t position) {
    ready[graph.resource_slot(position)].push({now, position});
    touch(graph.resource_slot(position));
  };
  // Queues are visited in index order only for a reproducible event order; a queue's pick
  // does not depend on the others.
  auto dispatch = [&] {
    std::sort(touched_list.begin(), touched_list.end());
    for (std::size_t queue : touched_list) {
      touched[queue] = 0;
      if (running[queue] != kNone || ready[queue].empty()) continue;
      const std::size_t position = ready[queue].top().position;
      ready[queue].pop();
      timeline.start[position] = now;
      timeline.end[position] = now + graph.duration(position);
      timeline.previous_on_resource[position] = last_started[queue];
      last_started[queue] = position;
      running[queue] = position;
      completions.push({timeline.end[position], position});
    }
    touched_list.clear();
  };

  for (std::size_t i = 0; i < n; ++i) {
    remaining[i] = graph.deps(i).size();
    if (remaining[i] == 0) make_ready(i);
  }
  dispatch();
  while (!completions.empty()) {
    now = completions.top().time;
    while (!completions.empty() && completions.top().time == now) {
      const std::size_t position = completions.top().position;
      completions.pop();
      running[graph.resource_slot(position)] = kNone;
      touch(graph.resource_slot(position));
      for (std::size_t successor : graph.successors(position)) {
        if (--remaining[successor] == 0) make_ready(successor);
      }
    }
    dispatch();
  }
  return timeline;
}

// total + delta, rejecting overflow; `what` and `index` name the total only when it fails.
std::int64_t checked_add(std::int64_t total, std::int64_t delta, const char* what, std::int32_t index) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(total, delta, &sum)) {
    reject(std::string(what) + " " + std::to_string(index) + " overflows a 64-bit byte count");
  }
  return sum;
}

// One change of a tier's running total. Within one time: releases of tasks that ran for a
// while, then zero-length tasks one by one (their own allocation precedes their release),
// then allocations of tasks that start now. That frees space at t before anyone claims it.
struct MemoryEvent {
  double time;
  std::int32_t phase;  // 0, 1 or 2 as above
  std::size_t position;
  std::int32_t step;   // within a zero-length task: 0 allocate, 1 release
  std::int32_t tier;
  std::int64_t delta;
};

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
  // Within equal keys every delta has the same sign, so their order cannot change a peak.
  std::sort(events.begin(), events.end(), [](const MemoryEvent& a, const MemoryEvent& b) {
    if (a.time != b.time) return a.time < b.time;
    if (a.phase != b.phase) return a.phase < b.phase;
    if (a.position != b.position) return a.position < b.position;
    return a.step < b.step;
  });
  std::vector<std::int64_t> peak = level;
  for (const MemoryEvent& event : events) {
    const auto tier = static_cast<std::size_t>(event.tier);
    level[tier] = checked_add(level[tier], event.delta, "memory total of tier", event.tier);
    peak[tier] = std::max(peak[tier], level[tier]);
  }
  return peak;
}

// Walks back from the last task to end, each step to the dependency or queue predecessor
// whose end is exactly this task's start (ties: lower position): the chain with no slack.
std::vector<std::int64_t> critical_path(const std::vector<SimTask>& tasks, const SimTaskGraph& graph,
                                        const Timeline& timeline) {
  if (tasks.empty()) return {};
  std::size_t current = 0;
  for (std::size_t i = 1; i < tasks.size(); ++i) {
    if (timeline.end[i] > timeline.end[current]) current = i;
  }
  std::vector<std::int64_t> path;
  // Every step moves to a task dispatched earlier, so at most n steps; the bound is a guard.
  for (std::size_t steps = 0; steps < tasks.size(); ++steps) {
    path.push_back(tasks[current].id);
    const double start = timeline.start[current];
    std::size_t best = kNone;
    auto consider = [&](std::size_t candidate) {
      if (candidate != kNone && timeline.end[candidate] == start && candidate < best) best = candidate;
    };
    for (std::size_t dep : graph.deps(current)) consider(dep);
    consider(timeline.previous_on_resource[current]);
    if (best == kNone) break;
    current = best;
  }
  std::reverse(path.begin(), path.end());
  return path;
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
  Timeline timeline = run_queues(graph);

  SimResult result;
  for (double end : timeline.end) result.makespan_s = std::max(result.makespan_s, end);
  result.peak_bytes = peak_bytes(tasks, timeline, std::move(initial_bytes));
  result.bytes_moved.assign(machine.links().size(), 0);
  for (const SimTask& task : tasks) {
    if (task.kind != SimTaskKind::Transfer) continue;
    auto& moved = result.bytes_moved[static_cast<std::size_t>(task.resource)];
    moved = checked_add(moved, task.bytes, "bytes moved over link", task.resource);
  }
  result.critical_path = critical_path(tasks, graph, timeline);
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
