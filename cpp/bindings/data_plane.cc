// Python view of the data plane: a program's runtime, each call's memory as zero-copy torch views,
// and runs that enter Python only for Compute instructions and copies that touch a device.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "python_kernel.h"
#include "tt/common/error.h"
#include "tt/runtime/data_plane.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tt::bindings {
namespace {

using ByteTensor = nb::ndarray<nb::pytorch, std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// A tensor's data_ptr(), as Python passes it.
std::byte* from_address(std::uintptr_t address) { return reinterpret_cast<std::byte*>(address); }

// A uint8 tensor over buffer `id`'s bytes; it keeps the arena alive, so torch never sees
// the bytes reused while it holds the view.
ByteTensor buffer_view(const Program& program, const CallMemory& memory, std::int64_t id) {
  const std::size_t position = program.buffer_position(id);
  auto [arena, offset] = memory.locate(position);
  auto* keep = new std::shared_ptr<HostArena>(std::move(arena));
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<HostArena>*>(p); });
  const auto bytes = static_cast<std::size_t>(program.buffers()[position].bytes);
  return ByteTensor((*keep)->data() + offset, {bytes}, owner);
}

// What Python calls to end a device copy it started: once, from any thread, with None or
// the exception it failed with (raised again from run()).
struct CopyDone {
  Finish finish;

  void operator()(nb::handle error) {
    if (!finish) throw Error(ErrorCode::InvalidArgument, "device copy: completed twice");
    std::exception_ptr failure;
    if (!error.is_none()) {
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
      try {
        throw nb::python_error();  // captures the exception just set, with its type
      } catch (...) {
        failure = std::current_exception();
      }
    }
    Finish ending = std::move(finish);
    finish = nullptr;
    nb::gil_scoped_release no_gil;  // what completes may wait for threads that need the GIL
    ending(std::move(failure));
  }
};

// Holds the program beside the plane so views can name buffers by id.
struct PyDataPlane {
  std::shared_ptr<const Program> program;
  std::unique_ptr<DataPlane> plane;

  ~PyDataPlane() { close(); }

  // Frees the arenas (but those that views still hold), joins the workers and closes the
  // spill files now; every later use raises. Idempotent.
  void close() {
    nb::gil_scoped_release no_gil;  // joining workers may wait for a kernel that needs the GIL
    plane.reset();
  }

  DataPlane& live() const {
    if (!plane) throw Error(ErrorCode::InvalidArgument, "data plane: used after close()");
    return *plane;
  }

  RunReport run(const std::shared_ptr<CallMemory>& memory, nb::callable compute, double stall_timeout_s,
                std::shared_ptr<CancelToken> cancel, std::optional<nb::callable> device_copy) {
    auto owner = std::make_shared<PythonKernel>(std::move(compute));
    ComputeKernel kernel = [owner](const Instruction& instruction) {
      keep_python_thread_state();
      nb::gil_scoped_acquire gil;
      owner->fn(instruction.id);
    };
    DeviceCopyKernel copies;
    if (device_copy) {
      auto copier = std::make_shared<PythonKernel>(std::move(*device_copy));
      copies = [copier](const Instruction& instruction, Finish done) {
        keep_python_thread_state();
        nb::gil_scoped_acquire gil;
        copier->fn(instruction.id, CopyDone{std::move(done)});
      };
    }
    RunOptions options;
    options.stall_timeout_s = stall_timeout_s;
    options.cancel = std::move(cancel);
    nb::gil_scoped_release no_gil;
    return live().run(memory, std::move(kernel), options, std::move(copies));
  }
};

}  // namespace

void bind_data_plane(nb::module_& m) {
  nb::class_<CopyDone>(m, "CopyDone")
      .def("__call__", &CopyDone::operator(), "error"_a.none() = nb::none(),
           "Ends the device copy it was given for: None on success, else the exception it failed with.");

  nb::class_<CallMemory>(m, "CallMemory")
      .def_prop_ro("peak_bytes", &CallMemory::peak_bytes,
                   "per tier: residents plus the most transient bytes live at once in this call")
      .def_prop_ro("host_arenas", &CallMemory::host_arenas,
                   "(address, bytes) of each host arena the call uses, the residents' and its own")
      .def("bind",
           [](CallMemory& self, std::int64_t buffer_id, std::uintptr_t address, std::int64_t nbytes) {
             self.bind(buffer_id, from_address(address), nbytes);
           },
           "buffer_id"_a, "address"_a, "nbytes"_a,
           "Binds an input or torch-owned buffer to nbytes at address (a tensor's data_ptr(), kept alive "
           "until the run returns) for this call, so copies read or write it natively; before run, or from "
           "the compute callback before any reader of the buffer starts.");

  nb::class_<PyDataPlane>(m, "DataPlane")
      .def("__init__",
           [](PyDataPlane* self, std::shared_ptr<const Program> program, std::shared_ptr<IoEngine> io,
              std::int32_t workers, std::string spill_dir) {
             new (self) PyDataPlane{
                 program, std::make_unique<DataPlane>(program, std::move(io), workers, std::move(spill_dir))};
           },
           "program"_a, "io"_a.none(), "workers"_a = 1, nb::kw_only(), "spill_dir"_a = "",
           "Allocates the program's resident arenas and books them in its ledger. A program that spills needs "
           "io and spill_dir, an existing directory for its spill files: anonymous files, so nothing is ever "
           "left in it.")
      .def("begin_call", [](PyDataPlane& self, double timeout_s) { return self.live().begin_call(timeout_s); },
           "timeout_s"_a, nb::call_guard<nb::gil_scoped_release>(),
           "A call's memory, once the ledger has room for its working set (MemoryCapacityError on timeout).")
      .def("end_call", [](PyDataPlane& self, const std::shared_ptr<CallMemory>& memory) { self.live().end_call(memory); },
           "memory"_a)
      .def("open_files", [](PyDataPlane& self) { self.live().open_files(); },
           "Opens every file the loads read now; from then on the plane reads them whatever happens to their paths.")
      .def("run", &PyDataPlane::run, "memory"_a, "compute"_a, "stall_timeout_s"_a = 300.0,
           "cancel"_a.none() = nb::none(), "device_copy"_a.none() = nb::none(),
           "Runs the program for one call: loads, host copies and frees natively, compute(instruction_id) "
           "for Compute instructions, device_copy(instruction_id, done) for copies that touch a device tier "
           "(it calls done() or done(exception) once the copy has completed, from any thread); re-raises "
           "the first error.")
      .def("view", [](PyDataPlane& self, const CallMemory& memory, std::int64_t id) {
             return buffer_view(*self.program, memory, id);
           }, "memory"_a, "buffer_id"_a, "A uint8 tensor over a buffer the core holds (resident or this call's).")
      .def("resident_memory", [](PyDataPlane& self) { return self.live().resident_memory(); },
           "The resident buffers alone, for filling them before the first call.")
      .def("bind_resident",
           [](PyDataPlane& self, std::int64_t buffer_id, std::uintptr_t address, std::int64_t nbytes) {
             self.live().bind_resident(buffer_id, from_address(address), nbytes);
           },
           "buffer_id"_a, "address"_a, "nbytes"_a,
           "Binds a resident, torch-owned buffer to nbytes at address (a tensor's data_ptr(), kept alive "
           "as long as the plane) for every call begun after it; before calls start.")
      .def("held", [](PyDataPlane& self, std::int32_t tier) { return self.live().ledger().held(tier); }, "tier"_a)
      .def("ledger_peak", [](PyDataPlane& self, std::int32_t tier) { return self.live().ledger().peak(tier); },
           "tier"_a)
      .def_prop_ro("program", [](PyDataPlane& self) { return self.program; })
      .def("close", &PyDataPlane::close,
           "Frees the resident and pooled arenas (those no view holds), joins the workers and closes the "
           "spill files at once; every later use raises. Idempotent.");
}

}  // namespace tt::bindings
