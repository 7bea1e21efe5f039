// Python view of the safetensors header reader: validated tensor entries and metadata of one file.
#include <string>

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "tt/storage/safetensors.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tt::bindings {
namespace {

std::string repr(const TensorEntry& t) {
  std::string shape;
  for (std::int64_t dim : t.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(dim);
  return "SafetensorsTensorEntry(name=" + nb::cast<std::string>(nb::repr(nb::cast(t.name))) + ", dtype='" +
         std::string(dtype_name(t.dtype)) + "', shape=[" + shape + "], begin=" + std::to_string(t.begin) +
         ", end=" + std::to_string(t.end) + ")";
}

}  // namespace

void bind_safetensors(nb::module_& m) {
  // Read-only: a header is validated as a whole, so editing one field could break its invariants.
  nb::class_<TensorEntry> entry(m, "SafetensorsTensorEntry");
  entry.def_ro("name", &TensorEntry::name)
      .def_prop_ro("dtype", [](const TensorEntry& t) { return std::string(dtype_name(t.dtype)); },
                   "The safetensors name of the element type (\"F32\", \"BF16\", ...).")
      .def_ro("shape", &TensorEntry::shape)
      .def_ro("begin", &TensorEntry::begin, "First byte, relative to the data section.")
      .def_ro("end", &TensorEntry::end, "One past the last byte, relative to the data section.")
      .def("__repr__", [](const TensorEntry& t) { return repr(t); });

  nb::class_<SafetensorsHeader>(m, "SafetensorsHeader")
      .def_ro("file_label", &SafetensorsHeader::file_label)
      .def_ro("header_bytes", &SafetensorsHeader::header_bytes, "N: the JSON header's length, padding included.")
      .def_ro("data_offset", &SafetensorsHeader::data_offset, "8 + N: where the data section starts in the file.")
      .def_ro("tensors", &SafetensorsHeader::tensors, "Tensor entries sorted by offset.")
      .def_prop_ro("metadata",
                   [](const SafetensorsHeader& h) {
                     nb::dict out;
                     for (const auto& [key, value] : h.metadata) out[nb::cast(key)] = nb::cast(value);
                     return out;
                   },
                   "The __metadata__ strings (empty when absent or null).")
      .def("find", &SafetensorsHeader::find, "name"_a, nb::rv_policy::copy,
           "The entry called name; raises NotFoundError naming it and the file.")
      .def("__repr__", [](const SafetensorsHeader& h) {
        return "SafetensorsHeader(file_label=" + nb::cast<std::string>(nb::repr(nb::cast(h.file_label))) +
               ", data_offset=" + std::to_string(h.data_offset) + ", tensors=" + std::to_string(h.tensors.size()) +
               ")";
      });

  m.def("read_safetensors_header", &read_safetensors_header, "path"_a, nb::call_guard<nb::gil_scoped_release>(),
        "Reads and validates the header of the safetensors file at path, never its data section; raises "
        "DataCorruptionError for a broken file, NotFoundError for a missing one, StorageIOError when unreadable.");
}

}  // namespace tt::bindings
