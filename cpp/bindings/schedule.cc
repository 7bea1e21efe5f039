// Python view of instructions and validated schedules.
#include <memory>

#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "tt/ir/schedule.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tt::bindings {

void bind_schedule(nb::module_& m) {
  nb::enum_<InstructionKind>(m, "InstructionKind")
      .value("Compute", InstructionKind::Compute)
      .value("Load", InstructionKind::Load)
      .value("Copy", InstructionKind::Copy)
      .value("Spill", InstructionKind::Spill)
      .value("Reload", InstructionKind::Reload)
      .value("Free", InstructionKind::Free);

  nb::class_<Instruction>(m, "Instruction")
      .def("__init__",
           [](Instruction* self, std::int64_t id, InstructionKind kind, std::int32_t region,
              std::string device, std::string label, std::vector<std::int64_t> deps,
              double predicted_start_us, double predicted_end_us, double declared_us, std::int32_t queue,
              std::vector<std::int64_t> reads, std::vector<std::int64_t> writes) {
             new (self) Instruction{id, kind, region, std::move(device), std::move(label),
                                    std::move(deps), predicted_start_us, predicted_end_us, declared_us,
                                    queue, std::move(reads), std::move(writes)};
           },
           "id"_a, "kind"_a = InstructionKind::Compute, "region"_a = -1, "device"_a = "cpu",
           "label"_a = "", "deps"_a = std::vector<std::int64_t>{}, "predicted_start_us"_a = -1.0,
           "predicted_end_us"_a = -1.0, "declared_us"_a = 0.0, "queue"_a = -1,
           "reads"_a = std::vector<std::int64_t>{}, "writes"_a = std::vector<std::int64_t>{},
           "One program step. predicted_start_us/predicted_end_us: when a cost model expects it "
           "to run (microseconds from the run's start); both negative means no prediction. "
           "declared_us: it completes no sooner than this long after it starts (a virtual device's "
           "or link's declared speed; 0: as soon as its work is done). "
           "queue, reads and writes: its resource queue and buffer operands (checked by Program).")
      .def_rw("id", &Instruction::id)
      .def_rw("kind", &Instruction::kind)
      .def_rw("region", &Instruction::region)
      .def_rw("device", &Instruction::device)
      .def_rw("label", &Instruction::label)
      .def_rw("deps", &Instruction::deps)
      .def_ro("predicted_start_us", &Instruction::predicted_start_us)
      .def_ro("predicted_end_us", &Instruction::predicted_end_us)
      .def_rw("declared_us", &Instruction::declared_us)
      .def_rw("queue", &Instruction::queue)
      .def_rw("reads", &Instruction::reads)
      .def_rw("writes", &Instruction::writes)
      .def("__repr__", [](const Instruction& i) {
        return "Instruction(id=" + std::to_string(i.id) + ", kind=" +
               instruction_kind_name(i.kind) + ", label='" + i.label + "')";
      });

  // Held by shared_ptr: runs keep the schedule alive past a stalled run's return.
  nb::class_<Schedule>(m, "Schedule")
      .def(nb::init<std::vector<Instruction>>(), "instructions"_a,
           "Validates the instruction DAG; raises ScheduleError naming the offending ids.")
      .def("__len__", &Schedule::size)
      .def_prop_ro("instructions", &Schedule::instructions)
      .def_prop_ro("roots", &Schedule::roots)
      .def_prop_ro("topological_order", &Schedule::topological_order)
      .def("successors", [](const Schedule& s, std::size_t index) {
        if (index >= s.size()) throw nb::index_error("instruction position out of range");
        return s.successors(index);
      }, "index"_a);
}

}  // namespace tt::bindings
