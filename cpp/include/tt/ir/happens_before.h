// Whether one instruction of a DAG always finishes before another starts, whatever order the executor picks.
#pragma once

#include <cstddef>
#include <vector>

#include "tt/ir/schedule.h"

namespace tt {

// Answers reachability queries over a schedule's dependencies by a depth-first search
// pruned by topological rank. Not thread-safe (it reuses its visit marks); cheap to build.
class HappensBefore {
 public:
  // Copies the dependencies and ranks it needs from `schedule`.
  explicit HappensBefore(const Schedule& schedule);

  // True when the instruction at position `before` is a (transitive) dependency of the
  // one at position `after`; false for before == after.
  bool precedes(std::size_t before, std::size_t after) const;

  // Topological rank of each position (its index in schedule.topological_order()).
  const std::vector<std::size_t>& rank() const noexcept { return rank_; }

 private:
  std::vector<std::vector<std::size_t>> predecessors_;
  std::vector<std::size_t> rank_;
  mutable std::vector<std::size_t> mark_;
  mutable std::size_t epoch_ = 0;
  mutable std::vector<std::size_t> stack_;
};

}  // namespace tt
