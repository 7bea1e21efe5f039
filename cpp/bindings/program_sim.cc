// Python view of the program simulator: simulate_program() over a Program and its result.
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "repr_text.h"
#include "tt/sim/program_sim.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tt::bindings {

void bind_program_sim(nb::module_& m) {
  nb::class_<ProgramSimResult>(m, "ProgramSimResult")
      .def_ro("makespan_s", &ProgramSimResult::makespan_s, "end of the last instruction")
      .def_ro("start_s", &ProgramSimResult::start_s, "per position in program.schedule")
      .def_ro("end_s", &ProgramSimResult::end_s, "per position in program.schedule")
      .def_ro("peak_bytes", &ProgramSimResult::peak_bytes, "per tier: resident + highest live transient bytes")
      .def_ro("arena_bytes", &ProgramSimResult::arena_bytes, "per tier: the memory plan's arena")
      .def_ro("bytes_moved", &ProgramSimResult::bytes_moved, "per queue: bytes its data movements wrote")
      .def_ro("busy_s", &ProgramSimResult::busy_s, "per queue: sum of its instructions' durations")
      .def_ro("critical_path", &ProgramSimResult::critical_path, "instruction ids, first to last")
      .def("__repr__", [](const ProgramSimResult& r) {
        return "ProgramSimResult(makespan_s=" + number(r.makespan_s) + ", instructions=" +
               std::to_string(r.start_s.size()) + ", critical_path=" + std::to_string(r.critical_path.size()) +
               " instructions)";
      });

  m.def("simulate_program",
        [](const Program& program, std::vector<double> seconds, std::optional<std::vector<double>> queue_bytes_per_s,
           std::optional<std::vector<double>> queue_latency_s, std::optional<std::vector<double>> earliest_start_s) {
          ProgramCosts costs{std::move(seconds), std::move(queue_bytes_per_s).value_or(std::vector<double>{}),
                             std::move(queue_latency_s).value_or(std::vector<double>{}),
                             std::move(earliest_start_s).value_or(std::vector<double>{})};
          return simulate_program(program, costs);
        },
        "program"_a, "seconds"_a, "queue_bytes_per_s"_a = nb::none(), "queue_latency_s"_a = nb::none(),
        "earliest_start_s"_a = nb::none(), nb::call_guard<nb::gil_scoped_release>(),
        "Simulates the program the executor runs: seconds per position in program.schedule (negative: derived "
        "for a data movement from its bytes and queue_bytes_per_s / queue_latency_s, per queue); with "
        "earliest_start_s, no instruction starts sooner than given (a call's measured starts replay it). "
        "Raises ScheduleError naming the instruction for bad costs.");
  m.def("transfer_seconds", &transfer_seconds, "bytes"_a, "bytes_per_s"_a, "latency_s"_a = 0.0,
        "latency_s + bytes / bytes_per_s; raises on negative bytes or a bandwidth that is not positive.");
}

}  // namespace tt::bindings
