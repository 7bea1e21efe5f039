// One step of a schedule: what it does, which region it serves, and what it waits for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tt {

// The kinds of work a schedule can hold. Later issues add Load, Evict, Spill and Reload;
// append new kinds so that the numeric values stay stable.
enum class InstructionKind : std::int32_t {
  Compute,   // run one region's kernel
  Transfer,  // move values between memory tiers; the kernel does the copy
};

// Stable lowercase name of a kind ("compute", "transfer"), used in reports and traces.
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
};

}  // namespace tt
