// A validated program: tiers, queues, buffers and instructions with operands, and its static memory plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "tt/ir/buffer.h"
#include "tt/ir/memory_plan.h"
#include "tt/ir/schedule.h"

namespace tt {

// Everything a program is made of, as the planner produces it; a plain value.
struct ProgramSpec {
  std::vector<Tier> tiers;
  std::vector<Queue> queues;
  std::vector<FileSpec> files;
  std::vector<Buffer> buffers;
  std::vector<Instruction> instructions;  // in the planner's order: a valid topological order
  std::vector<std::int64_t> outputs;      // buffer ids handed back to the caller at the end of a call
};

// The one program that is simulated and executed. Immutable after construction, so it
// is safe to share across threads and calls.
class Program {
 public:
  // Validates `spec` and builds its memory plan. Throws Error(InvalidArgument), naming the
  // instruction and the buffer, for: a malformed tier, queue, file or buffer; an unknown
  // queue or buffer; operands that do not fit the kind (a Load reads one file range and
  // writes one host buffer of its size, ...); a buffer read before it is written (no write
  // ordered before the read, whatever order the executor picks); a transient buffer used
  // after (or possibly after) its Free, freed twice, never freed, or freed though resident;
  // a declared_us that is negative or not finite; and the schedule's own rules (ids, deps,
  // cycles). Throws Error(ResourceExhausted) when
  // a tier's arena would exceed its capacity, naming the tier and both figures.
  explicit Program(ProgramSpec spec);

  const std::vector<Tier>& tiers() const noexcept { return spec_.tiers; }
  const std::vector<Queue>& queues() const noexcept { return spec_.queues; }
  const std::vector<FileSpec>& files() const noexcept { return spec_.files; }
  const std::vector<Buffer>& buffers() const noexcept { return spec_.buffers; }
  const std::vector<std::int64_t>& outputs() const noexcept { return spec_.outputs; }

  // The instructions with the dependencies the memory plan added, validated; shared with
  // the executor's runs.
  const std::shared_ptr<const Schedule>& schedule() const noexcept { return schedule_; }

  // Where every buffer lives in its tier's arena, and how large each arena is.
  const MemoryPlan& memory_plan() const noexcept { return plan_; }

  // Position in buffers() of the buffer with this id; Error(NotFound) if none.
  std::size_t buffer_position(std::int64_t id) const;

  // Per instruction position: the buffers (positions in buffers()) whose life starts when
  // it starts (it writes them first), and those whose life ends when it ends (a Free).
  // The executor's ledger and the simulator count memory by these.
  const std::vector<std::vector<std::size_t>>& first_writes() const noexcept { return first_writes_; }
  const std::vector<std::vector<std::size_t>>& frees() const noexcept { return frees_; }

 private:
  ProgramSpec spec_;
  std::unordered_map<std::int64_t, std::size_t> buffer_position_;
  MemoryPlan plan_;
  std::shared_ptr<const Schedule> schedule_;
  std::vector<std::vector<std::size_t>> first_writes_;
  std::vector<std::vector<std::size_t>> frees_;
};

}  // namespace tt
