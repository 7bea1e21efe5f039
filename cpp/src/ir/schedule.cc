// Validation and indexing of an instruction DAG: id checks, successor lists, topological order.
#include "tt/ir/schedule.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "tt/common/error.h"

namespace tt {
namespace {

[[noreturn]] void reject_schedule(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, "schedule: " + message);
}

// Called when Kahn's algorithm could not order every instruction. Every unordered
// instruction still waits on at least one unordered dependency, so following such
// dependencies from any of them must revisit an instruction: that loop is a cycle.
// Starting at the lowest unordered position keeps the message deterministic.
[[noreturn]] void reject_cycle(const std::vector<Instruction>& instructions,
                               const std::unordered_map<std::int64_t, std::size_t>& position_of,
                               const std::vector<bool>& ordered) {
  std::size_t current = static_cast<std::size_t>(std::find(ordered.begin(), ordered.end(), false) - ordered.begin());
  std::vector<std::size_t> path;
  std::vector<std::size_t> step_of(instructions.size(), instructions.size());
  while (step_of[current] == instructions.size()) {
    step_of[current] = path.size();
    path.push_back(current);
    for (std::int64_t dep : instructions[current].deps) {
      const std::size_t dep_position = position_of.at(dep);
      if (!ordered[dep_position]) {
        current = dep_position;
        break;
      }
    }
  }
  // path[step_of[current]..] walks against the dependency arrows; print it backwards so
  // "a -> b" reads "a runs before b".
  std::string message = "dependency cycle " + std::to_string(instructions[current].id);
  for (std::size_t step = path.size(); step-- > step_of[current];) {
    message += " -> " + std::to_string(instructions[path[step]].id);
  }
  reject_schedule(message);
}

// A prediction is both times or neither: a lone start or end, or an end before the start,
// would draw a bar that means nothing in a trace.
void check_prediction(const Instruction& instruction, const std::string& who) {
  const double start = instruction.predicted_start_us;
  const double end = instruction.predicted_end_us;
  std::ostringstream got;
  got << "got start " << start << " and end " << end;
  if (!std::isfinite(start) || !std::isfinite(end)) {
    reject_schedule(who + " predicted_start_us and predicted_end_us must be finite, " + got.str());
  }
  if ((start < 0) != (end < 0)) {
    reject_schedule(who + " predicted_start_us and predicted_end_us must both be >= 0 or both negative (no prediction), " +
           got.str());
  }
  if (start >= 0 && end < start) reject_schedule(who + " predicted_end_us must not be before predicted_start_us, " + got.str());
}

}  // namespace

Schedule::Schedule(std::vector<Instruction> instructions)
    : instructions_(std::move(instructions)),
      successors_(instructions_.size()),
      dependency_counts_(instructions_.size()) {
  const std::size_t n = instructions_.size();

  std::unordered_map<std::int64_t, std::size_t> position_of;
  for (std::size_t i = 0; i < n; ++i) {
    if (!position_of.emplace(instructions_[i].id, i).second) {
      reject_schedule("duplicate instruction id " + std::to_string(instructions_[i].id));
    }
  }

  for (std::size_t i = 0; i < n; ++i) {
    const Instruction& instruction = instructions_[i];
    const std::string who = "instruction " + std::to_string(instruction.id);
    check_prediction(instruction, who);
    std::unordered_set<std::int64_t> seen;
    for (std::int64_t dep : instruction.deps) {
      if (dep == instruction.id) reject_schedule(who + " depends on itself");
      const auto found = position_of.find(dep);
      if (found == position_of.end()) {
        reject_schedule(who + " depends on unknown instruction " + std::to_string(dep));
      }
      if (!seen.insert(dep).second) {
        reject_schedule(who + " depends on instruction " + std::to_string(dep) + " twice");
      }
      // Visiting i in ascending order keeps every successor list ascending.
      successors_[found->second].push_back(i);
    }
    dependency_counts_[i] = instruction.deps.size();
    if (instruction.deps.empty()) roots_.push_back(i);
  }

  // Kahn's algorithm with a min-heap, so the order depends only on the input.
  std::vector<std::size_t> remaining = dependency_counts_;
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready(roots_.begin(), roots_.end());
  std::vector<bool> ordered(n, false);
  topological_order_.reserve(n);
  while (!ready.empty()) {
    const std::size_t next = ready.top();
    ready.pop();
    ordered[next] = true;
    topological_order_.push_back(next);
    for (std::size_t successor : successors_[next]) {
      if (--remaining[successor] == 0) ready.push(successor);
    }
  }
  if (topological_order_.size() != n) reject_cycle(instructions_, position_of, ordered);
}

}  // namespace tt
