// Python view of the storage helpers: atomic publishing of artifact directories.
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "tt/storage/path_exchange.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tt::bindings {

void bind_storage(nb::module_& m) {
  m.def("exchange_paths", &exchange_paths, "a"_a, "b"_a, nb::call_guard<nb::gil_scoped_release>(),
        "Atomically swaps two directory entries on one filesystem (renameat2 RENAME_EXCHANGE).");
}

}  // namespace tt::bindings
