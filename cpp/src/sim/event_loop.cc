// The program simulator's event loop: queues with capacities, the critical path and the memory sweep.
#include "tt/sim/event_loop.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <string>
#include <utility>

#include "tt/common/error.h"

namespace tt {
namespace {

// A ready position: ordered by when it became ready, then its tie rank, then its position.
struct ReadyStamp {
  double time;
  std::size_t rank;
  std::size_t position;
};

struct LaterReady {
  bool operator()(const ReadyStamp& a, const ReadyStamp& b) const {
    if (a.time != b.time) return a.time > b.time;
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.position > b.position;
  }
};

// A completion (time, position) or an idle slot (free since, slot): earliest first, then lowest index.
using Stamp = std::pair<double, std::size_t>;
using EarliestFirst = std::priority_queue<Stamp, std::vector<Stamp>, std::greater<Stamp>>;

// One queue's state: its ready positions and its slots. Slots are created on first use,
// so a queue of capacity 1 << 30 costs what it runs, not what it could run.
struct QueueState {
  std::priority_queue<ReadyStamp, std::vector<ReadyStamp>, LaterReady> ready;
  EarliestFirst idle_slots;                // slots that ran something and are free again
  std::vector<std::size_t> last_in_slot;   // per created slot: its latest occupant
  std::size_t running = 0;
};

}  // namespace

void TimedDag::index_successors() {
  const std::size_t n = size();
  successor_offsets.assign(n + 1, 0);
  for (std::size_t dep : dep_positions) ++successor_offsets[dep + 1];
  for (std::size_t i = 0; i < n; ++i) successor_offsets[i + 1] += successor_offsets[i];
  successor_positions.resize(dep_positions.size());
  // Filling in ascending i keeps every row ascending.
  std::vector<std::size_t> fill(successor_offsets.begin(), successor_offsets.end() - 1);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t dep : deps(i)) successor_positions[fill[dep]++] = i;
  }
}

Timeline run_queues(const TimedDag& dag) {
  const std::size_t n = dag.size();
  Timeline timeline{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0),
                    std::vector<std::size_t>(n, Timeline::npos)};
  std::vector<QueueState> queues(dag.capacity.size());
  std::vector<std::size_t> slot_of(n, 0);
  std::vector<char> touched(queues.size(), 0);
  std::vector<std::size_t> touched_list;
  std::vector<std::size_t> remaining(n);
  EarliestFirst completions;
  EarliestFirst releases;  // positions whose dependencies are done, waiting for their release time
  double now = 0.0;

  auto touch = [&](std::size_t queue) {
    if (!touched[queue]) {
      touched[queue] = 1;
      touched_list.push_back(queue);
    }
  };
  auto ready_now = [&](std::size_t position) {
    const std::size_t rank = dag.tie_rank.empty() ? position : dag.tie_rank[position];
    queues[dag.queue[position]].ready.push({now, rank, position});
    touch(dag.queue[position]);
  };
  auto make_ready = [&](std::size_t position) {
    if (!dag.release.empty() && dag.release[position] > now) {
      releases.push({dag.release[position], position});
    } else {
      ready_now(position);
    }
  };
  // Queues are visited in index order only for a reproducible event order; a queue's picks
  // do not depend on the others.
  auto dispatch = [&] {
    std::sort(touched_list.begin(), touched_list.end());
    for (std::size_t q : touched_list) {
      touched[q] = 0;
      QueueState& state = queues[q];
      const auto capacity = static_cast<std::size_t>(dag.capacity[q]);
      while (state.running < capacity && !state.ready.empty()) {
        const std::size_t position = state.ready.top().position;
        state.ready.pop();
        // A fresh slot has been idle since the start, longer than any freed one.
        std::size_t slot = state.last_in_slot.size();
        if (slot < capacity) {
          state.last_in_slot.push_back(Timeline::npos);
        } else {
          slot = state.idle_slots.top().second;
          state.idle_slots.pop();
        }
        timeline.start[position] = now;
        timeline.end[position] = now + dag.duration[position];
        timeline.previous_in_slot[position] = state.last_in_slot[slot];
        state.last_in_slot[slot] = position;
        slot_of[position] = slot;
        ++state.running;
        completions.push({timeline.end[position], position});
      }
    }
    touched_list.clear();
  };

  for (std::size_t i = 0; i < n; ++i) {
    remaining[i] = dag.deps(i).size();
    if (remaining[i] == 0) make_ready(i);
  }
  dispatch();
  while (!completions.empty() || !releases.empty()) {
    now = completions.empty() ? releases.top().first
          : releases.empty()  ? completions.top().first
                              : std::min(completions.top().first, releases.top().first);
    while (!completions.empty() && completions.top().first == now) {
      const std::size_t position = completions.top().second;
      completions.pop();
      QueueState& state = queues[dag.queue[position]];
      --state.running;
      state.idle_slots.push({now, slot_of[position]});
      touch(dag.queue[position]);
      for (std::size_t successor : dag.successors(position)) {
        if (--remaining[successor] == 0) make_ready(successor);
      }
    }
    while (!releases.empty() && releases.top().first == now) {
      ready_now(releases.top().second);
      releases.pop();
    }
    dispatch();
  }
  return timeline;
}

std::vector<std::size_t> critical_chain(const TimedDag& dag, const Timeline& timeline) {
  const std::size_t n = dag.size();
  if (n == 0) return {};
  std::size_t current = 0;
  for (std::size_t i = 1; i < n; ++i) {
    if (timeline.end[i] > timeline.end[current]) current = i;
  }
  std::vector<std::size_t> path;
  // Every step moves to a position dispatched earlier, so at most n steps; the bound is a guard.
  for (std::size_t steps = 0; steps < n; ++steps) {
    path.push_back(current);
    const double start = timeline.start[current];
    std::size_t best = Timeline::npos;
    auto consider = [&](std::size_t candidate) {
      if (candidate != Timeline::npos && timeline.end[candidate] == start && candidate < best) best = candidate;
    };
    for (std::size_t dep : dag.deps(current)) consider(dep);
    consider(timeline.previous_in_slot[current]);
    if (best == Timeline::npos) break;
    current = best;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

std::vector<std::int64_t> sweep_peaks(std::vector<MemoryEvent> events, std::vector<std::int64_t> level,
                                      const char* who) {
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
    if (__builtin_add_overflow(level[tier], event.delta, &level[tier])) {
      throw Error(ErrorCode::InvalidArgument, std::string(who) + ": memory total of tier " +
                                                  std::to_string(event.tier) + " overflows a 64-bit byte count");
    }
    peak[tier] = std::max(peak[tier], level[tier]);
  }
  return peak;
}

}  // namespace tt
