// Reachability over a schedule's dependencies, pruned by topological rank.
#include "tt/ir/happens_before.h"

namespace tt {

HappensBefore::HappensBefore(const Schedule& schedule)
    : predecessors_(schedule.size()),
      rank_(schedule.size()),
      mark_(schedule.size(), 0) {
  for (std::size_t position = 0; position < schedule.size(); ++position) {
    for (std::size_t successor : schedule.successors(position)) predecessors_[successor].push_back(position);
  }
  const auto& order = schedule.topological_order();
  for (std::size_t rank = 0; rank < order.size(); ++rank) rank_[order[rank]] = rank;
}

bool HappensBefore::precedes(std::size_t before, std::size_t after) const {
  if (before == after || rank_[before] >= rank_[after]) return false;
  // Walk dependencies back from `after`; nothing ranked below `before` can reach it.
  ++epoch_;
  stack_.assign(1, after);
  mark_[after] = epoch_;
  while (!stack_.empty()) {
    const std::size_t current = stack_.back();
    stack_.pop_back();
    for (std::size_t predecessor : predecessors_[current]) {
      if (predecessor == before) return true;
      if (mark_[predecessor] == epoch_ || rank_[predecessor] < rank_[before]) continue;
      mark_[predecessor] = epoch_;
      stack_.push_back(predecessor);
    }
  }
  return false;
}

}  // namespace tt
