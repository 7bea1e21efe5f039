// simulate_program(): a Program's schedule through the shared event loop, with the runtime's memory model.
#include "tt/sim/program_sim.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "tt/common/error.h"
#include "tt/sim/event_loop.h"

namespace tt {
namespace {

[[noreturn]] void reject(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, "simulate_program: " + message);
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

std::string instruction_name(const Instruction& instruction) {
  std::string name = std::string(instruction_kind_name(instruction.kind)) + " " + std::to_string(instruction.id);
  if (!instruction.label.empty()) name += " ('" + instruction.label + "')";
  return name;
}

bool moves_data(InstructionKind kind) {
  return kind == InstructionKind::Load || kind == InstructionKind::Copy || kind == InstructionKind::Spill ||
         kind == InstructionKind::Reload;
}

std::int64_t bytes_written(const Program& program, const Instruction& instruction) {
  std::int64_t total = 0;
  for (std::int64_t id : instruction.writes) total += program.buffers()[program.buffer_position(id)].bytes;
  return total;
}

void check_queue_figures(const Program& program, const std::vector<double>& figures, const char* field) {
  const std::size_t queues = program.queues().size();
  if (!figures.empty() && figures.size() != queues) {
    reject(std::string(field) + " has " + std::to_string(figures.size()) + " entries, expected 0 or one per queue (" +
           std::to_string(queues) + ")");
  }
  for (std::size_t q = 0; q < figures.size(); ++q) {
    if (!std::isfinite(figures[q]) || figures[q] < 0.0) {
      reject(std::string(field) + " of queue '" + program.queues()[q].name + "' is " + number(figures[q]) +
             ", expected a finite number >= 0");
    }
  }
}

// The duration of every position: as given, or derived from bytes for a data movement.
std::vector<double> durations(const Program& program, const ProgramCosts& costs) {
  const auto& instructions = program.schedule()->instructions();
  if (costs.seconds.size() != instructions.size()) {
    reject("costs.seconds has " + std::to_string(costs.seconds.size()) + " entries, expected one per instruction (" +
           std::to_string(instructions.size()) + ")");
  }
  check_queue_figures(program, costs.queue_bytes_per_s, "queue_bytes_per_s");
  check_queue_figures(program, costs.queue_latency_s, "queue_latency_s");
  std::vector<double> seconds(instructions.size());
  for (std::size_t p = 0; p < instructions.size(); ++p) {
    const Instruction& instruction = instructions[p];
    const double given = costs.seconds[p];
    if (!std::isfinite(given)) {
      reject(instruction_name(instruction) + " has seconds " + number(given) + ", expected a finite number");
    }
    if (given >= 0.0) {
      seconds[p] = given;
      continue;
    }
    const auto queue = static_cast<std::size_t>(instruction.queue);
    const double bandwidth = costs.queue_bytes_per_s.empty() ? 0.0 : costs.queue_bytes_per_s[queue];
    if (!moves_data(instruction.kind) || bandwidth <= 0.0) {
      reject(instruction_name(instruction) + " has seconds " + number(given) + ": a negative duration is derived " +
             "only for a data movement on a queue with a known bandwidth (queue '" + program.queues()[queue].name +
             "')");
    }
    const double latency = costs.queue_latency_s.empty() ? 0.0 : costs.queue_latency_s[queue];
    seconds[p] = transfer_seconds(bytes_written(program, instruction), bandwidth, latency);
  }
  return seconds;
}

// The schedule as the event loop's DAG: positions, dependencies, queues with capacities,
// and the topological rank that breaks ties.
TimedDag timed_dag(const Program& program, std::vector<double> seconds) {
  const Schedule& schedule = *program.schedule();
  const std::size_t n = schedule.size();
  TimedDag dag;
  dag.dep_offsets.assign(n + 1, 0);
  for (std::size_t p = 0; p < n; ++p) dag.dep_offsets[p + 1] = dag.dep_offsets[p] + schedule.dependency_count(p);
  dag.dep_positions.resize(dag.dep_offsets[n]);
  std::vector<std::size_t> fill(dag.dep_offsets.begin(), dag.dep_offsets.end() - 1);
  for (std::size_t p = 0; p < n; ++p) {
    for (std::size_t successor : schedule.successors(p)) dag.dep_positions[fill[successor]++] = p;
  }
  for (const Instruction& instruction : schedule.instructions()) {
    dag.queue.push_back(static_cast<std::size_t>(instruction.queue));
  }
  dag.duration = std::move(seconds);  // before index_successors(), which counts positions by it
  dag.index_successors();
  for (const Queue& queue : program.queues()) dag.capacity.push_back(queue.capacity);
  dag.tie_rank.resize(n);
  for (std::size_t r = 0; r < n; ++r) dag.tie_rank[schedule.topological_order()[r]] = r;
  return dag;
}

// Per tier: the resident region, plus the highest sum of live transients. A transient lives
// from its first writer's start to its Free's end; only arena buffers count (not inputs,
// not file ranges), by their own bytes.
std::vector<std::int64_t> peak_bytes(const Program& program, const Timeline& timeline) {
  const auto& buffers = program.buffers();
  constexpr double kNever = -1.0;
  std::vector<double> begin(buffers.size(), kNever);
  std::vector<double> end(buffers.size(), kNever);
  for (std::size_t p = 0; p < program.first_writes().size(); ++p) {
    for (std::size_t b : program.first_writes()[p]) begin[b] = timeline.start[p];
    for (std::size_t b : program.frees()[p]) end[b] = timeline.end[p];
  }
  std::vector<MemoryEvent> events;
  for (std::size_t b = 0; b < buffers.size(); ++b) {
    const Buffer& buffer = buffers[b];
    if (buffer.lifetime != BufferLifetime::Transient || buffer.file >= 0 || begin[b] == kNever) continue;
    if (end[b] == begin[b]) {  // its whole life takes no time
      events.push_back({begin[b], 1, b, 0, buffer.tier, buffer.bytes});
      events.push_back({end[b], 1, b, 1, buffer.tier, -buffer.bytes});
      continue;
    }
    events.push_back({begin[b], 2, b, 0, buffer.tier, buffer.bytes});
    if (end[b] != kNever) events.push_back({end[b], 0, b, 1, buffer.tier, -buffer.bytes});
  }
  return sweep_peaks(std::move(events), program.memory_plan().resident_bytes, "simulate_program");
}

}  // namespace

double transfer_seconds(std::int64_t bytes, double bytes_per_s, double latency_s) {
  if (bytes < 0) reject("transfer of " + std::to_string(bytes) + " bytes, expected >= 0");
  if (!std::isfinite(bytes_per_s) || bytes_per_s <= 0.0) {
    reject("bandwidth " + number(bytes_per_s) + " bytes/s, expected a positive finite number");
  }
  if (!std::isfinite(latency_s) || latency_s < 0.0) {
    reject("latency " + number(latency_s) + " s, expected a finite number >= 0");
  }
  return latency_s + static_cast<double>(bytes) / bytes_per_s;
}

ProgramSimResult simulate_program(const Program& program, const ProgramCosts& costs) {
  TimedDag dag = timed_dag(program, durations(program, costs));
  if (!costs.earliest_start_s.empty()) {
    const auto& instructions = program.schedule()->instructions();
    if (costs.earliest_start_s.size() != instructions.size()) {
      reject("costs.earliest_start_s has " + std::to_string(costs.earliest_start_s.size()) +
             " entries, expected none or one per instruction (" + std::to_string(instructions.size()) + ")");
    }
    for (std::size_t p = 0; p < instructions.size(); ++p) {
      const double at = costs.earliest_start_s[p];
      if (!std::isfinite(at) || at < 0.0) {
        reject(instruction_name(instructions[p]) + " has earliest start " + number(at) +
               ", expected a finite number >= 0");
      }
    }
    dag.release = costs.earliest_start_s;
  }
  Timeline timeline = run_queues(dag);
  const auto& instructions = program.schedule()->instructions();

  ProgramSimResult result;
  for (double end : timeline.end) result.makespan_s = std::max(result.makespan_s, end);
  result.peak_bytes = peak_bytes(program, timeline);
  result.arena_bytes = program.memory_plan().arena_bytes;
  result.bytes_moved.assign(program.queues().size(), 0);
  result.busy_s.assign(program.queues().size(), 0.0);
  for (std::size_t p = 0; p < instructions.size(); ++p) {
    const Instruction& instruction = instructions[p];
    result.busy_s[dag.queue[p]] += dag.duration[p];
    if (moves_data(instruction.kind)) result.bytes_moved[dag.queue[p]] += bytes_written(program, instruction);
  }
  for (std::size_t p : critical_chain(dag, timeline)) result.critical_path.push_back(instructions[p].id);
  result.start_s = std::move(timeline.start);
  result.end_s = std::move(timeline.end);
  return result;
}

}  // namespace tt
