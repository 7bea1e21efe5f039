// Python view of the memory the core owns: the ledger and host arenas handed to torch without copies.
#include <memory>

#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "tt/common/error.h"
#include "tt/memory/heap_retention.h"
#include "tt/memory/host_arena.h"
#include "tt/memory/ledger.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tt::bindings {
namespace {

using ByteTensor = nb::ndarray<nb::pytorch, std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// A uint8 torch tensor over [offset, offset + bytes) of the arena; the tensor keeps the
// arena alive, so the bytes stay valid while torch holds any view of them.
ByteTensor arena_view(const std::shared_ptr<HostArena>& arena, std::int64_t offset, std::int64_t bytes) {
  if (offset < 0 || bytes < 0 || offset > arena->size() - bytes) {
    throw Error(ErrorCode::InvalidArgument, "host arena: view [" + std::to_string(offset) + ", " +
                                                std::to_string(offset + bytes) + ") lies outside its " +
                                                std::to_string(arena->size()) + " bytes");
  }
  auto* keep = new std::shared_ptr<HostArena>(arena);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<HostArena>*>(p); });
  return ByteTensor(arena->data() + offset, {static_cast<std::size_t>(bytes)}, owner);
}

}  // namespace

void bind_memory(nb::module_& m) {
  nb::class_<MemoryLedger>(m, "MemoryLedger")
      .def(nb::init<std::vector<Tier>>(), "tiers"_a)
      .def("reserve", &MemoryLedger::reserve, "tier"_a, "bytes"_a, "what"_a)
      .def("reserve_all", &MemoryLedger::reserve_all, "bytes"_a, "timeout_s"_a, "what"_a,
           nb::call_guard<nb::gil_scoped_release>(), "Takes every tier's bytes at once, waiting for room; False on timeout.")
      .def("release", &MemoryLedger::release, "tier"_a, "bytes"_a)
      .def("release_all", &MemoryLedger::release_all, "bytes"_a)
      .def("held", &MemoryLedger::held, "tier"_a)
      .def("peak", &MemoryLedger::peak, "tier"_a)
      .def("capacity", &MemoryLedger::capacity, "tier"_a)
      .def("reset_peaks", &MemoryLedger::reset_peaks);

  nb::class_<HostArena>(m, "HostArena")
      .def_prop_ro("size", &HostArena::size)
      .def_prop_ro("alignment", &HostArena::alignment)
      .def_prop_ro("address", [](const HostArena& a) { return reinterpret_cast<std::uintptr_t>(a.data()); })
      .def("view", &arena_view, "offset"_a, "bytes"_a, "A uint8 tensor over these bytes, without a copy.");

  nb::class_<HostArenaPool>(m, "HostArenaPool")
      .def(nb::init<std::int64_t, std::int64_t>(), "arena_bytes"_a, "alignment"_a = 4096)
      .def("acquire", &HostArenaPool::acquire, "An arena from the pool (reused once every handle to it is gone).")
      .def_prop_ro("arena_bytes", &HostArenaPool::arena_bytes)
      .def_prop_ro("allocated", &HostArenaPool::allocated);

  nb::class_<HeapRetention>(m, "HeapRetention")
      .def_ro("supported", &HeapRetention::supported)
      .def_ro("trim_bytes", &HeapRetention::trim_bytes)
      .def_ro("mmap_threshold", &HeapRetention::mmap_threshold)
      .def("__repr__", [](const HeapRetention& h) {
        return std::string("HeapRetention(supported=") + (h.supported ? "True" : "False") +
               ", trim_bytes=" + std::to_string(h.trim_bytes) + ", mmap_threshold=" + std::to_string(h.mmap_threshold) +
               ")";
      });
  m.def("retain_freed_heap", &retain_freed_heap, "bytes"_a,
        "Keeps at least `bytes` of freed heap mapped for reuse (glibc only; never lowered); returns what is in force.");
  m.def("heap_retention", &heap_retention, "What retain_freed_heap has set in this process.");
}

}  // namespace tt::bindings
