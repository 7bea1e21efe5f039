// Python view of the placement search: problems, assignments, the searches and the cost model.
#include <cstdio>
#include <string>
#include <vector>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "repr_text.h"
#include "tt/planner/objective.h"
#include "tt/planner/placement_cost.h"
#include "tt/planner/search.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tt::bindings {
namespace {

// Calls an optional Python evaluator, evaluator(devices: list[int], resident: list[bool])
// -> seconds. The search runs with the GIL released, possibly on several threads, so each
// call takes the GIL for itself. The caller's argument keeps the callable alive for the
// whole search; the wrapper only borrows it, so copies need no reference counting.
Evaluator python_evaluator(const nb::object& evaluator) {
  if (evaluator.is_none()) return {};
  if (!PyCallable_Check(evaluator.ptr())) throw nb::type_error("evaluator must be callable or None");
  const nb::handle function = evaluator;
  return [function](const Assignment& assignment) -> double {
    nb::gil_scoped_acquire gil;
    nb::list devices;
    for (std::int32_t device : assignment.device) devices.append(device);
    nb::list resident;
    for (bool flag : assignment.resident) resident.append(flag);
    const nb::object value = function(devices, resident);
    double seconds = 0.0;
    if (!nb::try_cast<double>(value, seconds)) {
      const std::string type = nb::type_name(value.type()).c_str();
      throw nb::type_error(("evaluator must return a float (seconds), got " + type).c_str());
    }
    return seconds;
  };
}

Assignment make_assignment(std::vector<std::int32_t> devices, std::vector<bool> resident) {
  return Assignment{std::move(devices), std::move(resident)};
}

std::string weights_text(const ObjectiveWeights& w) {
  return "ObjectiveWeights(latency=" + number(w.latency) + ", bottleneck=" + number(w.bottleneck) +
         ", traffic_per_byte=" + number(w.traffic_per_byte) + ")";
}

std::string list_text(const std::vector<std::int32_t>& values) {
  std::string text;
  for (std::int32_t value : values) text += (text.empty() ? "" : ", ") + std::to_string(value);
  return "[" + text + "]";
}

}  // namespace

void bind_planner(nb::module_& m) {
  nb::class_<PlacementRegion>(m, "PlacementRegion")
      .def("__init__",
           [](PlacementRegion* self, std::int64_t id, std::vector<double> compute_s, std::vector<std::int64_t> deps,
              std::int64_t param_bytes, std::int64_t output_bytes) {
             new (self) PlacementRegion{id, std::move(deps), std::move(compute_s), param_bytes, output_bytes};
           },
           nb::kw_only(), "id"_a, "compute_s"_a, "deps"_a = std::vector<std::int64_t>{}, "param_bytes"_a = 0,
           "output_bytes"_a = 0,
           "A region: compute_s per device (math.inf where it cannot run), the ids it reads, its "
           "parameter and output bytes.")
      .def_ro("id", &PlacementRegion::id)
      .def_ro("deps", &PlacementRegion::deps)
      .def_ro("compute_s", &PlacementRegion::compute_s)
      .def_ro("param_bytes", &PlacementRegion::param_bytes)
      .def_ro("output_bytes", &PlacementRegion::output_bytes)
      .def("__repr__", [](const PlacementRegion& r) {
        return "PlacementRegion(id=" + std::to_string(r.id) + ", deps=" + std::to_string(r.deps.size()) +
               " regions, param_bytes=" + std::to_string(r.param_bytes) + ", output_bytes=" +
               std::to_string(r.output_bytes) + ")";
      });

  nb::class_<PlacementDevice>(m, "PlacementDevice")
      .def("__init__",
           [](PlacementDevice* self, std::string name, std::int64_t capacity_bytes) {
             new (self) PlacementDevice{std::move(name), capacity_bytes};
           },
           nb::kw_only(), "name"_a, "capacity_bytes"_a, "A device and its room for resident parameters.")
      .def_ro("name", &PlacementDevice::name)
      .def_ro("capacity_bytes", &PlacementDevice::capacity_bytes)
      .def("__repr__", [](const PlacementDevice& d) {
        return "PlacementDevice(name='" + d.name + "', capacity_bytes=" + std::to_string(d.capacity_bytes) + ")";
      });

  // Read-only once built: the searches read it with the GIL released.
  nb::class_<PlacementProblem>(m, "PlacementProblem")
      .def("__init__",
           [](PlacementProblem* self, std::vector<PlacementRegion> regions, std::vector<PlacementDevice> devices,
              std::vector<std::vector<double>> transfer_s_per_byte, std::vector<double> stream_s_per_byte) {
             PlacementProblem problem{std::move(regions), std::move(devices), std::move(transfer_s_per_byte),
                                      std::move(stream_s_per_byte)};
             index_problem(problem);  // rejects a malformed problem here rather than at first use
             new (self) PlacementProblem(std::move(problem));
           },
           "regions"_a, "devices"_a, "transfer_s_per_byte"_a, "stream_s_per_byte"_a,
           "Regions in topological order, devices, transfer costs [from][to] and per-device stream "
           "costs (seconds per byte); raises InvalidArgument-class errors naming what is malformed.")
      .def_ro("regions", &PlacementProblem::regions)
      .def_ro("devices", &PlacementProblem::devices)
      .def_ro("transfer_s_per_byte", &PlacementProblem::transfer_s_per_byte)
      .def_ro("stream_s_per_byte", &PlacementProblem::stream_s_per_byte)
      .def("__repr__", [](const PlacementProblem& p) {
        return "PlacementProblem(" + std::to_string(p.regions.size()) + " regions, " +
               std::to_string(p.devices.size()) + " devices)";
      });

  nb::class_<Assignment>(m, "Assignment")
      .def_ro("device", &Assignment::device)
      .def_ro("resident", &Assignment::resident)
      .def("__eq__", [](const Assignment& a, const Assignment& b) { return a == b; })
      .def("__repr__", [](const Assignment& a) {
        std::string resident;
        for (bool flag : a.resident) resident += (resident.empty() ? "" : ", ") + std::string(flag ? "True" : "False");
        return "Assignment(device=" + list_text(a.device) + ", resident=[" + resident + "])";
      });

  // Checked where a search uses them, like the other options, so fields can be set one by one.
  nb::class_<ObjectiveWeights>(m, "ObjectiveWeights")
      .def("__init__",
           [](ObjectiveWeights* self, double latency, double bottleneck, double traffic_per_byte) {
             new (self) ObjectiveWeights{latency, bottleneck, traffic_per_byte};
           },
           nb::kw_only(), "latency"_a = ObjectiveWeights{}.latency, "bottleneck"_a = ObjectiveWeights{}.bottleneck,
           "traffic_per_byte"_a = ObjectiveWeights{}.traffic_per_byte,
           "What a search minimizes without an evaluator: latency * latency_s + bottleneck * "
           "bottleneck_s + traffic_per_byte * traffic_bytes. Each finite and >= 0, one > 0.")
      .def_rw("latency", &ObjectiveWeights::latency)
      .def_rw("bottleneck", &ObjectiveWeights::bottleneck)
      .def_rw("traffic_per_byte", &ObjectiveWeights::traffic_per_byte)
      .def("__eq__", [](const ObjectiveWeights& a, const ObjectiveWeights& b) { return a == b; })
      .def("__repr__", [](const ObjectiveWeights& w) { return weights_text(w); });

  nb::class_<PlacementMeasures>(m, "PlacementMeasures")
      .def_ro("latency_s", &PlacementMeasures::latency_s)
      .def_ro("bottleneck_s", &PlacementMeasures::bottleneck_s)
      .def_ro("traffic_bytes", &PlacementMeasures::traffic_bytes)
      .def("__repr__", [](const PlacementMeasures& p) {
        return "PlacementMeasures(latency_s=" + number(p.latency_s) + ", bottleneck_s=" + number(p.bottleneck_s) +
               ", traffic_bytes=" + std::to_string(p.traffic_bytes) + ")";
      });

  nb::class_<SearchOptions>(m, "SearchOptions")
      .def("__init__",
           [](SearchOptions* self, std::int32_t beam_width, std::int32_t threads, std::int32_t local_passes,
              std::int32_t finalists, ObjectiveWeights weights) {
             new (self) SearchOptions{beam_width, threads, local_passes, finalists, weights};
           },
           nb::kw_only(), "beam_width"_a = SearchOptions{}.beam_width, "threads"_a = SearchOptions{}.threads,
           "local_passes"_a = SearchOptions{}.local_passes, "finalists"_a = SearchOptions{}.finalists,
           "weights"_a = ObjectiveWeights{})
      .def_rw("beam_width", &SearchOptions::beam_width)
      .def_rw("threads", &SearchOptions::threads)
      .def_rw("local_passes", &SearchOptions::local_passes)
      .def_rw("finalists", &SearchOptions::finalists)
      .def_rw("weights", &SearchOptions::weights)
      .def("__repr__", [](const SearchOptions& o) {
        return "SearchOptions(beam_width=" + std::to_string(o.beam_width) + ", threads=" +
               std::to_string(o.threads) + ", local_passes=" + std::to_string(o.local_passes) +
               ", finalists=" + std::to_string(o.finalists) + ", weights=" + weights_text(o.weights) + ")";
      });

  nb::class_<SearchResult>(m, "SearchResult")
      .def_ro("best", &SearchResult::best)
      .def_ro("best_value", &SearchResult::best_value)
      .def_ro("finalists", &SearchResult::finalists)
      .def_ro("finalist_values", &SearchResult::finalist_values)
      .def_ro("evaluations", &SearchResult::evaluations)
      .def("__repr__", [](const SearchResult& r) {
        return "SearchResult(best_value=" + number(r.best_value) + ", finalists=" +
               std::to_string(r.finalists.size()) + ", evaluations=" + std::to_string(r.evaluations) + ")";
      });

  m.def("search_placement",
        [](const PlacementProblem& problem, SearchOptions options, const nb::object& evaluator) {
          const Evaluator evaluate = python_evaluator(evaluator);
          nb::gil_scoped_release no_gil;
          return search_placement(problem, options, evaluate);
        },
        "problem"_a, "options"_a = SearchOptions{}, "evaluator"_a.none() = nb::none(),
        "Device per region (beam search, then local improvement) with residency by the rule, "
        "minimizing options.weights over the measures (default: the list-schedule latency). "
        "evaluator(devices, resident) -> seconds replaces them; it is called with the GIL held, "
        "possibly from several threads when options.threads > 1.");
  m.def("exhaustive_placement",
        [](const PlacementProblem& problem, const nb::object& evaluator, ObjectiveWeights weights) {
          const Evaluator evaluate = python_evaluator(evaluator);
          nb::gil_scoped_release no_gil;
          return exhaustive_placement(problem, evaluate, weights);
        },
        "problem"_a, "evaluator"_a.none() = nb::none(), "weights"_a = ObjectiveWeights{},
        "Tries every placement (at most 2,000,000); for tests and benchmarks. Without an "
        "evaluator, ranks by the weighted measures (default: the latency).");
  m.def("evaluate_latency",
        [](const PlacementProblem& problem, std::vector<std::int32_t> devices, std::vector<bool> resident) {
          return evaluate_latency(problem, make_assignment(std::move(devices), std::move(resident)));
        },
        "problem"_a, "devices"_a, "resident"_a, "List-schedule makespan in seconds of a placement.");
  m.def("measure_placement",
        [](const PlacementProblem& problem, std::vector<std::int32_t> devices, std::vector<bool> resident) {
          return measure_placement(problem, make_assignment(std::move(devices), std::move(resident)));
        },
        "problem"_a, "devices"_a, "resident"_a,
        "Latency, busiest device's seconds per call and bytes moved per call of a placement.");
  m.def("assign_residency", &assign_residency, "problem"_a, "devices"_a,
        "The assignment placing region i on devices[i], parameters resident by the rule.");
}

}  // namespace tt::bindings
