// Python view of the executor: runs a schedule whose instructions call back into a
// Python kernel with their id, holding the GIL only for that call.
#include <memory>

#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "python_kernel.h"
#include "tt/runtime/executor.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tt::bindings {
namespace {

// The Python-facing executor. Joining the workers may wait for a kernel that needs the
// GIL, so the destructor releases it first.
class PyExecutor {
 public:
  explicit PyExecutor(std::int32_t workers) : impl_(std::make_unique<Executor>(ExecutorOptions{workers})) {}
  ~PyExecutor() {
    nb::gil_scoped_release no_gil;
    impl_.reset();
  }

  RunReport run(std::shared_ptr<const Schedule> schedule, nb::callable kernel,
                std::int32_t max_concurrent, double stall_timeout_s,
                std::shared_ptr<CancelToken> cancel, bool caller_runs) {
    auto owner = std::make_shared<PythonKernel>(std::move(kernel));
    Kernel call = [owner](const Instruction& instruction) {
      keep_python_thread_state();
      nb::gil_scoped_acquire gil;
      // The id, not the region: transfers have no region, and the kernel looks the
      // instruction up by id in whatever plan built the schedule.
      owner->fn(instruction.id);
    };
    RunOptions options{max_concurrent, stall_timeout_s, std::move(cancel), caller_runs};
    nb::gil_scoped_release no_gil;
    return impl_->run(std::move(schedule), std::move(call), options);
  }

  std::int32_t workers() const { return impl_->workers(); }

 private:
  std::unique_ptr<Executor> impl_;
};

}  // namespace

void bind_executor(nb::module_& m) {
  nb::class_<CancelToken>(m, "CancelToken")
      .def(nb::init<>())
      .def("request", &CancelToken::request, "Stop the running (or next) run before its next instruction.")
      .def("consume", &CancelToken::consume, "True if a request was pending; clears it.")
      .def_prop_ro("pending", &CancelToken::pending);

  nb::class_<InstructionRecord>(m, "InstructionRecord")
      .def("__init__",
           [](InstructionRecord* self, std::int64_t id, std::string label, std::string kind,
              std::string device, std::int32_t worker, double start_us, double end_us, bool ran,
              double predicted_start_us, double predicted_end_us) {
             new (self) InstructionRecord{id, std::move(label), std::move(kind), std::move(device),
                                          worker, start_us, end_us, ran, predicted_start_us,
                                          predicted_end_us};
           },
           "id"_a, "label"_a, "kind"_a, "device"_a, "worker"_a, "start_us"_a, "end_us"_a, "ran"_a,
           "predicted_start_us"_a = -1.0, "predicted_end_us"_a = -1.0)
      .def_ro("id", &InstructionRecord::id)
      .def_ro("label", &InstructionRecord::label)
      .def_ro("kind", &InstructionRecord::kind)
      .def_ro("device", &InstructionRecord::device)
      .def_ro("worker", &InstructionRecord::worker)
      .def_ro("start_us", &InstructionRecord::start_us)
      .def_ro("end_us", &InstructionRecord::end_us)
      .def_ro("ran", &InstructionRecord::ran)
      .def_ro("predicted_start_us", &InstructionRecord::predicted_start_us)
      .def_ro("predicted_end_us", &InstructionRecord::predicted_end_us)
      .def_ro("bytes", &InstructionRecord::bytes, "bytes it moved (loads and copies)");

  nb::class_<RunReport>(m, "RunReport")
      .def("__init__",
           [](RunReport* self, std::vector<InstructionRecord> records, double wall_us, std::int32_t workers) {
             new (self) RunReport{std::move(records), wall_us, workers};
           },
           "records"_a, "wall_us"_a, "workers"_a)
      .def_ro("records", &RunReport::records)
      .def_ro("wall_us", &RunReport::wall_us)
      .def_ro("workers", &RunReport::workers)
      .def_ro("bytes_read", &RunReport::bytes_read, "bytes its loads read from files")
      .def_ro("read_us", &RunReport::read_us, "microseconds with at least one load in progress")
      .def_ro("read_overlapped_us", &RunReport::read_overlapped_us, "of which some compute ran at the same time")
      .def("chrome_trace_json", &chrome_trace_json, "Chrome trace-event JSON that Perfetto opens.");

  nb::class_<PyExecutor>(m, "Executor")
      .def(nb::init<std::int32_t>(), "workers"_a)
      .def_prop_ro("workers", &PyExecutor::workers)
      .def("run", &PyExecutor::run, "schedule"_a, "kernel"_a, "max_concurrent"_a = 0,
           "stall_timeout_s"_a = 300.0, "cancel"_a.none() = nb::none(), "caller_runs"_a = true,
           "Runs the schedule, calling kernel(instruction_id) for every instruction, whatever its "
           "kind (on this thread too when caller_runs); waits with the GIL released and re-raises "
           "the first error.");
}

}  // namespace tt::bindings
