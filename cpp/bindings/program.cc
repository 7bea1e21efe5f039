// Python view of the program IR: tiers, queues, files, buffers, programs and their memory plans.
#include <limits>
#include <memory>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "tt/ir/program.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tt::bindings {

void bind_program(nb::module_& m) {
  nb::enum_<TierKind>(m, "TierKind").value("Host", TierKind::Host).value("Device", TierKind::Device)
      .value("Disk", TierKind::Disk);
  nb::enum_<QueueKind>(m, "QueueKind").value("Compute", QueueKind::Compute).value("Io", QueueKind::Io)
      .value("Link", QueueKind::Link);
  nb::enum_<BufferLifetime>(m, "BufferLifetime").value("Resident", BufferLifetime::Resident)
      .value("Transient", BufferLifetime::Transient).value("Input", BufferLifetime::Input);

  nb::class_<Tier>(m, "Tier")
      .def(nb::init<std::string, TierKind, std::int64_t>(), "name"_a, "kind"_a = TierKind::Host,
           "capacity_bytes"_a = std::numeric_limits<std::int64_t>::max())
      .def_rw("name", &Tier::name).def_rw("kind", &Tier::kind).def_rw("capacity_bytes", &Tier::capacity_bytes);
  nb::class_<Queue>(m, "Queue")
      .def(nb::init<std::string, QueueKind, std::int32_t>(), "name"_a, "kind"_a = QueueKind::Compute,
           "capacity"_a = 1)
      .def_rw("name", &Queue::name).def_rw("kind", &Queue::kind).def_rw("capacity", &Queue::capacity);
  nb::class_<FileSpec>(m, "FileSpec")
      .def(nb::init<std::string, std::int64_t, std::int64_t, std::vector<std::string>, std::optional<FileIdentity>>(),
           "path"_a, "bytes"_a, "chunk_bytes"_a = 0, "chunk_sha256"_a = std::vector<std::string>{},
           "verified_as"_a = nb::none())
      .def_rw("path", &FileSpec::path).def_rw("bytes", &FileSpec::bytes)
      .def_rw("chunk_bytes", &FileSpec::chunk_bytes).def_rw("chunk_sha256", &FileSpec::chunk_sha256)
      .def_rw("verified_as", &FileSpec::verified_as);
  nb::class_<Buffer>(m, "Buffer")
      .def("__init__",
           [](Buffer* self, std::int64_t id, std::int32_t tier, std::int64_t bytes, std::int64_t alignment,
              std::string dtype, std::vector<std::int64_t> shape, BufferLifetime lifetime, std::string label,
              std::int32_t file, std::int64_t file_offset, bool torch_owned, std::int64_t crc32c, std::int64_t phase) {
             new (self) Buffer{id, tier, bytes, alignment, std::move(dtype), std::move(shape), lifetime,
                               std::move(label), file, file_offset, torch_owned, crc32c, phase};
           },
           "id"_a, "tier"_a, "bytes"_a, "alignment"_a = 64, "dtype"_a = "", "shape"_a = std::vector<std::int64_t>{},
           "lifetime"_a = BufferLifetime::Transient, "label"_a = "", "file"_a = -1, "file_offset"_a = 0,
           "torch_owned"_a = false, "crc32c"_a = -1, "phase"_a = 0)
      .def_ro("id", &Buffer::id).def_ro("tier", &Buffer::tier).def_ro("bytes", &Buffer::bytes)
      .def_ro("alignment", &Buffer::alignment).def_ro("dtype", &Buffer::dtype).def_ro("shape", &Buffer::shape)
      .def_ro("lifetime", &Buffer::lifetime).def_ro("label", &Buffer::label).def_ro("file", &Buffer::file)
      .def_ro("file_offset", &Buffer::file_offset).def_ro("torch_owned", &Buffer::torch_owned)
      .def_ro("crc32c", &Buffer::crc32c).def_ro("phase", &Buffer::phase);

  nb::class_<MemoryPlan>(m, "MemoryPlan")
      .def_ro("offsets", &MemoryPlan::offsets, "per buffer: offset in its tier's arena (-1: none)")
      .def_ro("arena_bytes", &MemoryPlan::arena_bytes, "per tier: bytes its arena needs")
      .def_ro("resident_bytes", &MemoryPlan::resident_bytes, "per tier: of which resident across calls")
      .def_ro("owned_bytes", &MemoryPlan::owned_bytes, "per tier: the core's own arena (torch-owned bytes excluded)")
      .def_ro("owned_resident_bytes", &MemoryPlan::owned_resident_bytes, "per tier: its resident part")
      .def_ro("peak_bytes", &MemoryPlan::peak_bytes, "per tier: most bytes live at once in the plan's order")
      .def_ro("reuse_deps", &MemoryPlan::reuse_deps, "(free position, writer position) pairs the plan added");

  // Held by shared_ptr: executors and simulations share one immutable program.
  nb::class_<Program>(m, "Program")
      .def("__init__",
           [](Program* self, std::vector<Tier> tiers, std::vector<Queue> queues, std::vector<FileSpec> files,
              std::vector<Buffer> buffers, std::vector<Instruction> instructions, std::vector<std::int64_t> outputs) {
             new (self) Program(ProgramSpec{std::move(tiers), std::move(queues), std::move(files), std::move(buffers),
                                            std::move(instructions), std::move(outputs)});
           },
           "tiers"_a, "queues"_a, "files"_a, "buffers"_a, "instructions"_a, "outputs"_a = std::vector<std::int64_t>{},
           nb::call_guard<nb::gil_scoped_release>(),
           "Validates the program and plans its memory; raises ScheduleError naming the instruction and the "
           "buffer, or MemoryCapacityError when a tier's arena exceeds its capacity.")
      .def_prop_ro("tiers", &Program::tiers)
      .def_prop_ro("queues", &Program::queues)
      .def_prop_ro("files", &Program::files)
      .def_prop_ro("buffers", &Program::buffers)
      .def_prop_ro("outputs", &Program::outputs)
      .def_prop_ro("schedule", &Program::schedule, "the instructions with the memory plan's dependencies added")
      .def_prop_ro("memory_plan", &Program::memory_plan)
      .def_prop_ro("first_writes", &Program::first_writes, "per position: buffer positions it writes first")
      .def_prop_ro("frees", &Program::frees, "per position: buffer positions it frees");
}

}  // namespace tt::bindings
