// Python view of the simulator: machine models, simulated tasks and simulate().
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "repr_text.h"
#include "tt/sim/simulator.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tt::bindings {
namespace {

std::string repr(const TierModel& t) {
  return "TierModel(name='" + t.name + "', capacity_bytes=" + std::to_string(t.capacity_bytes) + ")";
}

std::string repr(const DeviceModel& d) {
  return "DeviceModel(name='" + d.name + "', flops_per_s=" + number(d.flops_per_s) + ", memory_bytes_per_s=" +
         number(d.memory_bytes_per_s) + ", memory_tier=" + std::to_string(d.memory_tier) + ")";
}

std::string repr(const LinkModel& l) {
  return "LinkModel(name='" + l.name + "', from_tier=" + std::to_string(l.from_tier) + ", to_tier=" +
         std::to_string(l.to_tier) + ", bytes_per_s=" + number(l.bytes_per_s) + ", latency_s=" + number(l.latency_s) +
         ")";
}

std::string repr(const MachineModel& m) {
  std::string text = "MachineModel(tiers=[";
  for (std::size_t i = 0; i < m.tiers().size(); ++i) text += (i ? ", '" : "'") + m.tiers()[i].name + "'";
  text += "], devices=[";
  for (std::size_t i = 0; i < m.devices().size(); ++i) text += (i ? ", '" : "'") + m.devices()[i].name + "'";
  text += "], links=[";
  for (std::size_t i = 0; i < m.links().size(); ++i) text += (i ? ", '" : "'") + m.links()[i].name + "'";
  return text + "])";
}

std::string repr(const MemoryEffect& e) {
  return "MemoryEffect(tier=" + std::to_string(e.tier) + ", bytes=" + std::to_string(e.bytes) + ")";
}

std::string repr(const SimTask& t) {
  return "SimTask(id=" + std::to_string(t.id) + ", kind=" + sim_task_kind_name(t.kind) + ", resource=" +
         std::to_string(t.resource) + ", seconds=" + number(t.seconds) + ", bytes=" + std::to_string(t.bytes) +
         ", deps=" + std::to_string(t.deps.size()) + ", label='" + t.label + "')";
}

std::string repr(const SimResult& r) {
  return "SimResult(makespan_s=" + number(r.makespan_s) + ", tasks=" + std::to_string(r.start_s.size()) +
         ", critical_path=" + std::to_string(r.critical_path.size()) + " tasks, over_capacity_tiers=" +
         std::to_string(r.over_capacity_tiers.size()) + ")";
}

template <typename T>
void add_repr(nb::class_<T>& cls) {
  cls.def("__repr__", [](const T& value) { return repr(value); });
}

}  // namespace

void bind_sim(nb::module_& m) {
  // Descriptions are plain values, editable until they go into a MachineModel, which copies
  // and validates them.
  nb::class_<TierModel> tier(m, "TierModel");
  tier.def("__init__",
           [](TierModel* self, std::string name, std::int64_t capacity_bytes) {
             new (self) TierModel{std::move(name), capacity_bytes};
           },
           "name"_a, "capacity_bytes"_a)
      .def_rw("name", &TierModel::name)
      .def_rw("capacity_bytes", &TierModel::capacity_bytes);
  add_repr(tier);

  nb::class_<DeviceModel> device(m, "DeviceModel");
  device.def("__init__",
           [](DeviceModel* self, std::string name, double flops_per_s, double memory_bytes_per_s,
              std::int32_t memory_tier) {
             new (self) DeviceModel{std::move(name), flops_per_s, memory_bytes_per_s, memory_tier};
           },
           "name"_a, "flops_per_s"_a, "memory_bytes_per_s"_a, "memory_tier"_a)
      .def_rw("name", &DeviceModel::name)
      .def_rw("flops_per_s", &DeviceModel::flops_per_s)
      .def_rw("memory_bytes_per_s", &DeviceModel::memory_bytes_per_s)
      .def_rw("memory_tier", &DeviceModel::memory_tier);
  add_repr(device);

  nb::class_<LinkModel> link(m, "LinkModel");
  link.def("__init__",
           [](LinkModel* self, std::string name, std::int32_t from_tier, std::int32_t to_tier, double bytes_per_s,
              double latency_s) {
             new (self) LinkModel{std::move(name), from_tier, to_tier, bytes_per_s, latency_s};
           },
           "name"_a, "from_tier"_a, "to_tier"_a, "bytes_per_s"_a, "latency_s"_a = 0.0)
      .def_rw("name", &LinkModel::name)
      .def_rw("from_tier", &LinkModel::from_tier)
      .def_rw("to_tier", &LinkModel::to_tier)
      .def_rw("bytes_per_s", &LinkModel::bytes_per_s)
      .def_rw("latency_s", &LinkModel::latency_s);
  add_repr(link);

  // Properties return copies: handing out references would let Python edit a validated model.
  nb::class_<MachineModel> machine(m, "MachineModel");
  machine
      .def(nb::init<std::vector<TierModel>, std::vector<DeviceModel>, std::vector<LinkModel>>(), "tiers"_a,
           "devices"_a, "links"_a = std::vector<LinkModel>{},
           "Validates the description; raises ScheduleError naming the offending field.")
      .def_prop_ro("tiers", [](const MachineModel& self) { return self.tiers(); })
      .def_prop_ro("devices", [](const MachineModel& self) { return self.devices(); })
      .def_prop_ro("links", [](const MachineModel& self) { return self.links(); })
      .def("compute_seconds", &MachineModel::compute_seconds, "device"_a, "flops"_a, "bytes_touched"_a,
           "Roofline time on a device: max(flops / flops_per_s, bytes_touched / memory_bytes_per_s).")
      .def("transfer_seconds", &MachineModel::transfer_seconds, "link"_a, "bytes"_a,
           "latency_s + bytes / bytes_per_s of a link.")
      .def("find_link", &MachineModel::find_link, "from_tier"_a, "to_tier"_a,
           "Index of the first link from one tier to another, or None.");
  add_repr(machine);

  nb::enum_<SimTaskKind>(m, "SimTaskKind")
      .value("Compute", SimTaskKind::Compute)
      .value("Transfer", SimTaskKind::Transfer);

  nb::class_<MemoryEffect> effect(m, "MemoryEffect");
  effect
      .def("__init__", [](MemoryEffect* self, std::int32_t tier, std::int64_t bytes) {
        new (self) MemoryEffect{tier, bytes};
      }, "tier"_a, "bytes"_a)
      .def_rw("tier", &MemoryEffect::tier)
      .def_rw("bytes", &MemoryEffect::bytes);
  add_repr(effect);

  nb::class_<SimTask> task(m, "SimTask");
  task.def("__init__",
           [](SimTask* self, std::int64_t id, SimTaskKind kind, std::int32_t resource, double seconds,
              std::int64_t bytes, std::vector<std::int64_t> deps, std::vector<MemoryEffect> allocate_at_start,
              std::vector<MemoryEffect> release_at_end, std::string label) {
             new (self) SimTask{id, kind, resource, seconds, bytes, std::move(deps), std::move(allocate_at_start),
                                std::move(release_at_end), std::move(label)};
           },
           "id"_a, "kind"_a = SimTaskKind::Compute, "resource"_a = 0, "seconds"_a = 0.0, "bytes"_a = 0,
           "deps"_a = std::vector<std::int64_t>{}, "allocate_at_start"_a = std::vector<MemoryEffect>{},
           "release_at_end"_a = std::vector<MemoryEffect>{}, "label"_a = "")
      .def_rw("id", &SimTask::id)
      .def_rw("kind", &SimTask::kind)
      .def_rw("resource", &SimTask::resource)
      .def_rw("seconds", &SimTask::seconds)
      .def_rw("bytes", &SimTask::bytes)
      .def_rw("deps", &SimTask::deps)
      .def_rw("allocate_at_start", &SimTask::allocate_at_start)
      .def_rw("release_at_end", &SimTask::release_at_end)
      .def_rw("label", &SimTask::label);
  add_repr(task);

  nb::class_<SimResult> result(m, "SimResult");
  result.def_ro("makespan_s", &SimResult::makespan_s)
      .def_ro("start_s", &SimResult::start_s)
      .def_ro("end_s", &SimResult::end_s)
      .def_ro("peak_bytes", &SimResult::peak_bytes)
      .def_ro("bytes_moved", &SimResult::bytes_moved)
      .def_ro("critical_path", &SimResult::critical_path)
      .def_ro("over_capacity_tiers", &SimResult::over_capacity_tiers);
  add_repr(result);

  m.def("simulate", &simulate, "machine"_a, "tasks"_a, "initial_bytes"_a = std::vector<std::int64_t>{},
        nb::call_guard<nb::gil_scoped_release>(),
        "Discrete-event simulation of tasks on machine: per-task start and end, makespan, per-tier peak "
        "bytes (initial_bytes included), per-link bytes moved, the critical path and the tiers over "
        "capacity. Raises on invalid tasks, naming the task id.");
}

}  // namespace tt::bindings
