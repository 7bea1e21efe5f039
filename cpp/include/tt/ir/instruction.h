// One step of a program: what it does, on which queue, which buffers it reads and writes, and what it waits for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tt {

// The kinds of work a program can hold. Their numeric values stay stable: a new kind takes
// a new number (1 was the planner's copy between tiers from before buffers had operands,
// which Copy replaced).
enum class InstructionKind : std::int32_t {
  Compute = 0,  // run one region's kernel: reads its inputs, writes its outputs
  Load = 2,     // read a file range (a Disk buffer) into a host buffer
  Copy = 3,     // copy buffers to buffers (pairwise, equal sizes), between tiers or within one
  Spill = 4,    // write a host buffer to a Disk buffer in the spill file
  Reload = 5,   // read a spilled Disk buffer back into a host buffer
  Free = 6,     // give back the transient buffers it reads; writes nothing
};

// Stable lowercase name of a kind ("compute", "load", "copy", ...), used in reports and traces.
const char* instruction_kind_name(InstructionKind kind);

// A plain value: copied freely, owned by whoever holds it.
struct Instruction {
  std::int64_t id = 0;                  // unique within its schedule
  InstructionKind kind = InstructionKind::Compute;
  std::int32_t region = -1;             // region index the kernel runs (-1: none)
  std::string device = "cpu";           // where the work happens
  std::string label;                    // human-readable name for reports and traces
  std::vector<std::int64_t> deps;       // ids that must finish before this one starts
  // When a cost model expects it to run, in microseconds from the run's start; both
  // negative means no prediction. Reports and traces carry them next to what happened.
  double predicted_start_us = -1.0;
  double predicted_end_us = -1.0;
  // The instruction completes no sooner than this long after it starts: a virtual
  // device's or a link's declared speed, which the host running it may beat. 0: as soon as
  // its work is done. Checked by Program (finite, >= 0); the data plane honours it.
  double declared_us = 0.0;
  // Operands, checked by Program (a bare Schedule ignores them): the resource queue it
  // runs on (index into the program's queues; -1 outside a program) and the buffer ids
  // it reads and writes. A Free reads the buffers it frees.
  std::int32_t queue = -1;
  std::vector<std::int64_t> reads;
  std::vector<std::int64_t> writes;
};

}  // namespace tt
