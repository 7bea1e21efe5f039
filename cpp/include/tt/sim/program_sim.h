// Discrete-event simulation of a Program, the same one the executor runs: timings, memory peaks, queue use.
#pragma once

#include <cstdint>
#include <vector>

#include "tt/ir/program.h"

namespace tt {

// How long each instruction takes. Durations come from a cost model (measured region
// times, a measured disk bandwidth), not from the simulator; a plain value.
struct ProgramCosts {
  // Per position in program.schedule(): seconds once started, finite. Negative: derive it
  // for a data movement (Load, Copy, Spill, Reload) from the bytes it writes and
  // its queue's bandwidth; for Compute and Free it is an error.
  std::vector<double> seconds;
  std::vector<double> queue_bytes_per_s;  // empty, or per queue: finite, >= 0 (0: unknown, nothing derives there)
  std::vector<double> queue_latency_s;    // empty (all 0), or per queue: finite, >= 0, paid per derived instruction
  // Empty, or per position: finite, >= 0, the instruction starts no sooner. A call's
  // measured starts, with its measured durations, replay that call: the simulated timeline
  // is the measured one, and so are its memory peaks.
  std::vector<double> earliest_start_s;
};

// What one simulation found; a plain value. Positions are those of program.schedule().
struct ProgramSimResult {
  double makespan_s = 0.0;                  // end of the last instruction (0 for none)
  std::vector<double> start_s;              // per position
  std::vector<double> end_s;                // per position
  std::vector<std::int64_t> peak_bytes;     // per tier: resident + highest transient live bytes in the simulated order
  std::vector<std::int64_t> arena_bytes;    // per tier: the memory plan's arena, what a call really allocates
  std::vector<std::int64_t> bytes_moved;    // per queue: bytes written by its Load/Copy/Spill/Reload
  std::vector<double> busy_s;               // per queue: sum of its instructions' durations
  std::vector<std::int64_t> critical_path;  // instruction ids, first to last, of the chain with no slack
};

// latency_s + bytes / bytes_per_s. Throws Error(InvalidArgument) for negative bytes, a
// bandwidth that is not positive and finite, or a latency that is negative or not finite.
double transfer_seconds(std::int64_t bytes, double bytes_per_s, double latency_s);

// Runs `program`'s schedule (its instructions plus the memory plan's reuse dependencies).
//
// Every queue runs up to its capacity of instructions at once; an instruction is ready when
// its dependencies have finished, and among a queue's ready ones the one ready first starts
// first (ties: lower topological rank, then lower position). Memory, as the runtime holds
// it: a transient buffer is live from the start of its first writer to the end of its Free
// (outputs: to the end of the run); residents count throughout as their tier's resident
// region; inputs and file ranges count nothing. At equal times frees come before
// allocations; a buffer whose life takes no time counts for an instant in between. The
// memory plan makes peak_bytes[t] <= arena_bytes[t] hold in every run order.
//
// Throws Error(InvalidArgument), naming the instruction, when costs has the wrong number
// of entries, a duration is NaN or infinite, or a negative one cannot be derived; and for a
// malformed queue bandwidth or latency, naming the queue. Deterministic. O(n log n).
ProgramSimResult simulate_program(const Program& program, const ProgramCosts& costs);

}  // namespace tt
