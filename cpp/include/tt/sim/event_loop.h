// The discrete-event core of simulate_program(): timed work on queues with capacities.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tt {

// A validated DAG of timed work, by position, in compressed rows so the loop never hashes
// an id. simulate_program() fills one from a Program's schedule. A plain value; the event
// loop trusts it (acyclic, indices in range).
struct TimedDag {
  std::vector<std::size_t> dep_offsets{0};      // deps of position i: dep_positions[dep_offsets[i], dep_offsets[i + 1])
  std::vector<std::size_t> dep_positions;
  std::vector<std::size_t> successor_offsets;   // filled by index_successors()
  std::vector<std::size_t> successor_positions;
  std::vector<std::size_t> queue;               // per position: the queue it runs on
  std::vector<double> duration;                 // per position: seconds once started, finite and >= 0
  std::vector<std::int32_t> capacity;           // per queue: how many of its positions run at once, >= 1
  std::vector<std::size_t> tie_rank;            // per position: lower first among equally ready; empty: the position
  std::vector<double> release;                  // empty, or per position: it is ready no sooner than this

  // Number of positions.
  std::size_t size() const noexcept { return duration.size(); }

  // Positions this one waits for.
  std::span<const std::size_t> deps(std::size_t position) const {
    return {dep_positions.data() + dep_offsets[position], dep_offsets[position + 1] - dep_offsets[position]};
  }

  // Positions that wait for this one, ascending (once index_successors() ran).
  std::span<const std::size_t> successors(std::size_t position) const {
    return {successor_positions.data() + successor_offsets[position],
            successor_offsets[position + 1] - successor_offsets[position]};
  }

  // Builds the successor rows from the dependency rows; call once the deps are complete.
  void index_successors();
};

// When each position ran; a plain value.
struct Timeline {
  std::vector<double> start;
  std::vector<double> end;
  // The position that last held the queue slot this one ran in (npos: none), so the
  // critical path can follow waits for a queue as well as for dependencies.
  std::vector<std::size_t> previous_in_slot;
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
};

// Runs `dag` from time 0. A position is ready when its dependencies have finished (and its
// release time, if given, has come); a queue
// with a free slot starts, among its ready positions, the one ready first (ties: lower
// tie_rank, then lower position), in the slot idle the longest (ties: lower slot). All
// completions at one time are handled before any queue starts more, so work made ready at
// t competes fairly with work already waiting. Deterministic; O(n log n) in the positions.
Timeline run_queues(const TimedDag& dag);

// The chain with no slack, as positions first to last: from the last position to end
// (ties: lower position), each step back to the dependency or slot predecessor whose end
// is exactly this start (ties: lower position). Empty for an empty dag.
std::vector<std::size_t> critical_chain(const TimedDag& dag, const Timeline& timeline);

// One change of a tier's running total. Within one time: releases of what was held for a
// while (phase 0), then things held for no time, each as its own allocate-then-release
// (phase 1, step 0 then 1), then allocations of what is held from now (phase 2). Space
// freed at t is thus reusable at t, and an instant never coexists with what reuses it.
struct MemoryEvent {
  double time = 0.0;
  std::int32_t phase = 0;
  std::size_t position = 0;  // orders events within a phase, for determinism
  std::int32_t step = 0;
  std::int32_t tier = 0;     // a valid index into the levels
  std::int64_t delta = 0;
};

// Applies `events` in time order to `level` (per tier, the totals before time 0) and
// returns each tier's highest total. Throws Error(InvalidArgument, "<who>: memory total of
// tier T overflows a 64-bit byte count") on overflow.
std::vector<std::int64_t> sweep_peaks(std::vector<MemoryEvent> events, std::vector<std::int64_t> level,
                                      const char* who);

}  // namespace tt
