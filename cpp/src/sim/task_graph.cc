// Validation and indexing of simulator tasks: ids, dependencies, cycles, resources, memory effects.
#include "tt/sim/task_graph.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <limits>
#include <unordered_map>
#include <utility>

#include "tt/common/error.h"

namespace tt {
namespace {

[[noreturn]] void reject(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, "simulate: " + message);
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

void check_effects(const std::string& who, const char* field, const std::vector<MemoryEffect>& effects,
                   std::size_t tier_count) {
  for (const MemoryEffect& effect : effects) {
    if (effect.tier < 0 || static_cast<std::size_t>(effect.tier) >= tier_count) {
      reject(who + " " + field + " names tier " + std::to_string(effect.tier) + ", expected a tier index in [0, " +
             std::to_string(tier_count) + ")");
    }
    if (effect.bytes < 0) {
      reject(who + " " + field + " on tier " + std::to_string(effect.tier) + " has bytes " +
             std::to_string(effect.bytes) + ", expected >= 0");
    }
  }
}

// Validates one task's own fields and returns its queue slot.
std::size_t check_task(const MachineModel& machine, const SimTask& task) {
  const std::string who = "task " + std::to_string(task.id);
  const std::size_t devices = machine.devices().size();
  const std::size_t links = machine.links().size();
  std::size_t limit = 0;
  std::size_t base = 0;
  const char* wanted = nullptr;
  if (task.kind == SimTaskKind::Compute) {
    limit = devices;
    wanted = "a device index";
  } else if (task.kind == SimTaskKind::Transfer) {
    limit = links;
    base = devices;
    wanted = "a link index";
  } else {
    reject(who + " has unknown kind " + std::to_string(static_cast<std::int32_t>(task.kind)));
  }
  if (task.resource < 0 || static_cast<std::size_t>(task.resource) >= limit) {
    reject(who + " (" + sim_task_kind_name(task.kind) + ") has resource " + std::to_string(task.resource) +
           ", expected " + wanted + " in [0, " + std::to_string(limit) + ")");
  }
  if (!std::isfinite(task.seconds) || task.seconds < 0.0) {
    reject(who + " has seconds " + number(task.seconds) + ", expected a finite number >= 0");
  }
  if (task.bytes < 0) reject(who + " has bytes " + std::to_string(task.bytes) + ", expected >= 0");
  check_effects(who, "allocate_at_start", task.allocate_at_start, machine.tiers().size());
  check_effects(who, "release_at_end", task.release_at_end, machine.tiers().size());
  return base + static_cast<std::size_t>(task.resource);
}

// Called when Kahn's algorithm could not order every task. Each unordered task waits on an
// unordered dependency, so following those from the lowest unordered position must revisit
// a task: that loop is the cycle, printed so that "a -> b" reads "a runs before b".
[[noreturn]] void reject_cycle(const std::vector<SimTask>& tasks, const SimTaskGraph& graph,
                               const std::vector<std::size_t>& remaining) {
  const std::size_t n = tasks.size();
  std::size_t current = 0;
  while (remaining[current] == 0) ++current;
  std::vector<std::size_t> path;
  std::vector<std::size_t> step_of(n, n);
  while (step_of[current] == n) {
    step_of[current] = path.size();
    path.push_back(current);
    for (std::size_t dep : graph.deps(current)) {
      if (remaining[dep] != 0) {
        current = dep;
        break;
      }
    }
  }
  std::string message = "dependency cycle " + std::to_string(tasks[current].id);
  for (std::size_t step = path.size(); step-- > step_of[current];) {
    message += " -> " + std::to_string(tasks[path[step]].id);
  }
  reject(message);
}

// Maps task ids to positions. Planners number tasks densely, so when the ids span at most
// a few times their count a flat table replaces the hash map (a third of the time at 100k).
class IdIndex {
 public:
  explicit IdIndex(const std::vector<SimTask>& tasks) {
    if (tasks.empty()) return;
    const auto [low, high] = std::minmax_element(tasks.begin(), tasks.end(),
                                                 [](const SimTask& a, const SimTask& b) { return a.id < b.id; });
    low_ = low->id;
    // Unsigned: the span of two int64 values can exceed INT64_MAX.
    const std::uint64_t span = static_cast<std::uint64_t>(high->id) - static_cast<std::uint64_t>(low_);
    dense_ = span < 4 * static_cast<std::uint64_t>(tasks.size());
    if (dense_) table_.assign(static_cast<std::size_t>(span) + 1, kAbsent);
    else sparse_.reserve(tasks.size());
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      const std::int64_t id = tasks[i].id;
      const bool fresh = dense_ ? std::exchange(table_[offset(id)], i) == kAbsent : sparse_.emplace(id, i).second;
      if (!fresh) reject("duplicate task id " + std::to_string(id));
    }
  }

  // The position of `id`, or kAbsent.
  std::size_t find(std::int64_t id) const {
    if (!dense_) {
      const auto found = sparse_.find(id);
      return found == sparse_.end() ? kAbsent : found->second;
    }
    if (id < low_ || static_cast<std::uint64_t>(id) - static_cast<std::uint64_t>(low_) >= table_.size()) return kAbsent;
    return table_[offset(id)];
  }

  static constexpr std::size_t kAbsent = std::numeric_limits<std::size_t>::max();

 private:
  std::size_t offset(std::int64_t id) const {
    return static_cast<std::size_t>(static_cast<std::uint64_t>(id) - static_cast<std::uint64_t>(low_));
  }

  std::int64_t low_ = 0;
  bool dense_ = false;
  std::vector<std::size_t> table_;
  std::unordered_map<std::int64_t, std::size_t> sparse_;
};

}  // namespace

SimTaskGraph::SimTaskGraph(const MachineModel& machine, const std::vector<SimTask>& tasks) {
  const std::size_t n = tasks.size();
  const IdIndex position_of(tasks);

  dag_.capacity.assign(machine.devices().size() + machine.links().size(), 1);
  dag_.queue.reserve(n);
  dag_.duration.reserve(n);
  dag_.dep_offsets.reserve(n + 1);
  // last_reader[d] == i + 1 once task i listed d: finds repeats in O(1) even for wide joins.
  std::vector<std::size_t> last_reader(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const SimTask& task = tasks[i];
    const std::string who = "task " + std::to_string(task.id);
    dag_.queue.push_back(check_task(machine, task));
    dag_.duration.push_back(task.kind == SimTaskKind::Transfer ? machine.transfer_seconds(task.resource, task.bytes)
                                                              : task.seconds);
    for (std::int64_t dep : task.deps) {
      if (dep == task.id) reject(who + " depends on itself");
      const std::size_t found = position_of.find(dep);
      if (found == IdIndex::kAbsent) reject(who + " depends on unknown task " + std::to_string(dep));
      if (last_reader[found] == i + 1) reject(who + " depends on task " + std::to_string(dep) + " twice");
      last_reader[found] = i + 1;
      dag_.dep_positions.push_back(found);
    }
    dag_.dep_offsets.push_back(dag_.dep_positions.size());
  }
  dag_.index_successors();

  // Kahn's algorithm, order irrelevant: only whether every task gets ordered.
  std::vector<std::size_t> remaining(n);
  std::vector<std::size_t> ready;
  for (std::size_t i = 0; i < n; ++i) {
    remaining[i] = deps(i).size();
    if (remaining[i] == 0) ready.push_back(i);
  }
  std::size_t ordered = 0;
  while (!ready.empty()) {
    const std::size_t next = ready.back();
    ready.pop_back();
    ++ordered;
    for (std::size_t successor : successors(next)) {
      if (--remaining[successor] == 0) ready.push_back(successor);
    }
  }
  if (ordered != n) reject_cycle(tasks, *this, remaining);
}

}  // namespace tt
