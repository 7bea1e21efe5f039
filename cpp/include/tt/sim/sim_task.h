// One unit of simulated work: a computation on a device or a copy over a link, with its memory effects.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tt {

// What a task occupies. Append new kinds so the numeric values stay stable.
enum class SimTaskKind : std::int32_t {
  Compute,   // runs on a device for a given number of seconds
  Transfer,  // moves bytes over a link; its duration follows from the link
};

// Stable lowercase name of a kind ("compute", "transfer") for messages and reprs.
const char* sim_task_kind_name(SimTaskKind kind);

// Bytes that appear in or leave one memory tier; a plain value.
struct MemoryEffect {
  std::int32_t tier = 0;   // index into MachineModel::tiers()
  std::int64_t bytes = 0;  // never negative: the direction comes from where the effect is listed
};

// A plain value: copied freely, owned by whoever holds it.
struct SimTask {
  std::int64_t id = 0;                       // unique within one simulation
  SimTaskKind kind = SimTaskKind::Compute;
  std::int32_t resource = 0;                 // device index for Compute, link index for Transfer
  double seconds = 0.0;                      // Compute: its duration (Transfer ignores it)
  std::int64_t bytes = 0;                    // Transfer: bytes moved (Compute ignores it)
  std::vector<std::int64_t> deps;            // ids that must finish before this one starts
  std::vector<MemoryEffect> allocate_at_start;  // held from the task's start
  std::vector<MemoryEffect> release_at_end;     // given back at the task's end
  std::string label;                         // human-readable name for reports
};

}  // namespace tt
