// A validated, immutable instruction DAG with its dependency structure precomputed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tt/ir/instruction.h"

namespace tt {

// Immutable after construction and therefore safe to share across threads; the executor
// reads it concurrently from every worker.
class Schedule {
 public:
  // Validates and indexes `instructions`. Throws Error(InvalidArgument) naming the
  // offending id when ids repeat, a dependency names an unknown id, an instruction
  // depends on itself or twice on the same id, the dependencies form a cycle (the message
  // lists the ids on the cycle), or a prediction is malformed: NaN or infinite, only one of
  // predicted_start_us and predicted_end_us negative, or the end before the start. An empty
  // schedule is valid.
  explicit Schedule(std::vector<Instruction> instructions);

  // Instructions in the order given.
  const std::vector<Instruction>& instructions() const noexcept { return instructions_; }
  std::size_t size() const noexcept { return instructions_.size(); }

  // Positions (indices into instructions()) of the instructions that depend on the one
  // at `index`, in ascending order.
  const std::vector<std::size_t>& successors(std::size_t index) const { return successors_[index]; }

  // Number of dependencies of the instruction at `index`.
  std::size_t dependency_count(std::size_t index) const { return dependency_counts_[index]; }

  // Positions of the instructions with no dependencies, ascending.
  const std::vector<std::size_t>& roots() const noexcept { return roots_; }

  // A topological order (positions), deterministic: among ready instructions the lowest
  // position comes first.
  const std::vector<std::size_t>& topological_order() const noexcept { return topological_order_; }

 private:
  std::vector<Instruction> instructions_;
  std::vector<std::vector<std::size_t>> successors_;
  std::vector<std::size_t> dependency_counts_;
  std::vector<std::size_t> roots_;
  std::vector<std::size_t> topological_order_;
};

}  // namespace tt
