// Python view of the storage I/O engine: blocking reads into numpy/torch buffers, SHA-256, read-mode timing.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/operators.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "repr_text.h"
#include "tt/common/crc32c.h"
#include "tt/common/file_identity.h"
#include "tt/common/error.h"
#include "tt/common/sha256.h"
#include "tt/storage/io_engine.h"
#include "tt/storage/read_modes.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tt::bindings {
namespace {

// A writable, contiguous 1-D byte buffer in host memory: a numpy uint8 array, or a torch uint8
// tensor through DLPack. nanobind refuses read-only arrays for a non-const element type.
using ByteBuffer = nb::ndarray<std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

std::string repr(const IoStats& s) {
  return "IoStats(requests=" + std::to_string(s.requests) + ", failed_requests=" + std::to_string(s.failed_requests) +
         ", pieces=" + std::to_string(s.pieces) + ", bytes_read=" + std::to_string(s.bytes_read) +
         ", direct_bytes=" + std::to_string(s.direct_bytes) + ", buffered_bytes=" + std::to_string(s.buffered_bytes) +
         ", bytes_written=" + std::to_string(s.bytes_written) +
         ", chunks_verified=" + std::to_string(s.chunks_verified) +
         ", ranges_checksummed=" + std::to_string(s.ranges_checksummed) + ", busy_seconds=" + number(s.busy_seconds) +
         ", digest_seconds=" + number(s.digest_seconds) + ")";
}

std::string repr(const ReadModeResult& r) {
  return "ReadModeResult(mode='" + std::string(io_mode_name(r.candidate.mode)) + "', threads=" +
         std::to_string(r.candidate.threads) + ", request_bytes=" + std::to_string(r.candidate.request_bytes) +
         ", measured=" + (r.measured ? "True" : "False") + ", gigabytes_per_second=" + number(r.gigabytes_per_second) +
         (r.skipped_reason.empty() ? "" : ", skipped_reason='" + r.skipped_reason + "'") + ")";
}

IoFault write_fault_from_name(const std::string& name) {
  if (name == "eio") return IoFault::Eio;
  if (name == "enospc") return IoFault::Enospc;
  if (name == "short") return IoFault::Short;
  throw Error(ErrorCode::InvalidArgument,
              "IoEngine test_write_fault: expected 'none', 'eio', 'enospc' or 'short', got '" + name + "'");
}

void construct_engine(IoEngine* self, std::int32_t threads, std::int32_t queue_depth, std::uint64_t chunk_bytes,
                      const std::string& mode, double test_delay_s, const std::string& test_write_fault,
                      std::int64_t test_write_fault_at) {
  std::shared_ptr<IoBackend> backend = std::make_shared<PosixIoBackend>();
  if (test_delay_s != 0) {
    backend = std::make_shared<FaultInjectingIoBackend>(std::move(backend),
                                                        FaultPlan{IoFault::None, 1, false, test_delay_s});
  }
  if (test_write_fault != "none") {
    backend = std::make_shared<FaultInjectingIoBackend>(
        std::move(backend),
        FaultPlan{.fault = write_fault_from_name(test_write_fault), .at_call = test_write_fault_at, .reads = false});
  }
  new (self) IoEngine(IoEngineOptions{.threads = threads, .queue_depth = queue_depth, .chunk_bytes = chunk_bytes,
                                      .mode = io_mode_from_name(mode)},
                      std::move(backend));
}

void read_into(IoEngine& engine, const std::string& path, std::uint64_t offset, ByteBuffer buffer,
               const std::optional<std::vector<std::string>>& chunk_digests, std::uint64_t chunk_bytes) {
  std::shared_ptr<FileDigests> digests;
  if (chunk_digests) {
    digests = std::make_shared<FileDigests>();
    digests->chunk_bytes = chunk_bytes;
    digests->chunks.reserve(chunk_digests->size());
    for (const std::string& hex : *chunk_digests) digests->chunks.push_back(hex_to_digest(hex));
  }
  ReadRequest request{.path = path, .offset = offset, .length = buffer.shape(0), .destination = buffer.data(),
                      .digests = std::move(digests)};
  // `buffer` holds a reference to the array for the whole call, so its memory outlives the read.
  nb::gil_scoped_release release;
  engine.read(std::move(request));
}

}  // namespace

void bind_io(nb::module_& m) {
  nb::class_<IoStats> stats(m, "IoStats");
  stats.def_ro("requests", &IoStats::requests)
      .def_ro("failed_requests", &IoStats::failed_requests)
      .def_ro("pieces", &IoStats::pieces)
      .def_ro("bytes_read", &IoStats::bytes_read)
      .def_ro("direct_bytes", &IoStats::direct_bytes)
      .def_ro("buffered_bytes", &IoStats::buffered_bytes)
      .def_ro("bytes_written", &IoStats::bytes_written)
      .def_ro("chunks_verified", &IoStats::chunks_verified)
      .def_ro("ranges_checksummed", &IoStats::ranges_checksummed)
      .def_ro("busy_seconds", &IoStats::busy_seconds)
      .def_ro("digest_seconds", &IoStats::digest_seconds)
      .def("__repr__", [](const IoStats& s) { return repr(s); });

  // A method call holds a reference to the Python object, so the engine outlives every read_into.
  nb::class_<IoEngine>(m, "IoEngine",
                       "Reads file byte ranges on a pool of native I/O threads, checking SHA-256 chunk digests.")
      .def("__init__", &construct_engine, "threads"_a = 4, "queue_depth"_a = 8, "chunk_bytes"_a = kDefaultChunkBytes,
           "mode"_a = "auto", "test_delay_s"_a = 0.0, "test_write_fault"_a = "none", "test_write_fault_at"_a = 1,
           "mode: 'auto' (O_DIRECT where aligned and allowed), 'buffered' or 'direct'. For tests only: "
           "test_delay_s sleeps that long before every read and write to simulate a slow disk; test_write_fault "
           "('eio', 'enospc' or 'short': half written, then retried) hits the test_write_fault_at-th write "
           "(1-based, counted across the I/O threads), once.")
      .def("read_into", &read_into, "path"_a, "offset"_a, "buffer"_a, "chunk_digests"_a = nb::none(),
           "chunk_bytes"_a = kDefaultChunkBytes,
           "Fills the writable 1-D uint8 buffer (numpy array or torch tensor) with file bytes from offset, "
           "releasing the GIL until done. chunk_digests: sha256 hex of every chunk_bytes chunk of the whole "
           "file (integrity.json); chunks the read covers whole are checked (DataCorruptionError).")
      .def("stats", &IoEngine::stats, "Counters since the engine was created.")
      .def_prop_ro("direct_fallback_reason", &IoEngine::direct_fallback_reason,
                   "Why auto mode first read through the page cache instead of O_DIRECT; '' if it never did.");

  nb::class_<ReadModeResult> result(m, "ReadModeResult");
  result.def_prop_ro("mode", [](const ReadModeResult& r) { return std::string(io_mode_name(r.candidate.mode)); })
      .def_prop_ro("threads", [](const ReadModeResult& r) { return r.candidate.threads; })
      .def_prop_ro("request_bytes", [](const ReadModeResult& r) { return r.candidate.request_bytes; })
      .def_ro("measured", &ReadModeResult::measured)
      .def_ro("gigabytes_per_second", &ReadModeResult::gigabytes_per_second)
      .def_ro("samples", &ReadModeResult::samples)
      .def_ro("skipped_reason", &ReadModeResult::skipped_reason)
      .def("__repr__", [](const ReadModeResult& r) { return repr(r); });

  nb::class_<ReadModeMeasurement>(m, "ReadModeMeasurement")
      .def_ro("bytes", &ReadModeMeasurement::bytes)
      .def_ro("results", &ReadModeMeasurement::results)
      .def_ro("best", &ReadModeMeasurement::best);

  nb::class_<FileIdentity>(m, "FileIdentity",
                           "A file's device, inode, size and modification and change times (stat): equal "
                           "identities, the same bytes.")
      .def_ro("device", &FileIdentity::device)
      .def_ro("inode", &FileIdentity::inode)
      .def_ro("size", &FileIdentity::size)
      .def_ro("modified_ns", &FileIdentity::modified_ns)
      .def_ro("changed_ns", &FileIdentity::changed_ns)
      .def(nb::self == nb::self)
      .def("__repr__", [](const FileIdentity& f) {
        return "FileIdentity(device=" + std::to_string(f.device) + ", inode=" + std::to_string(f.inode) +
               ", size=" + std::to_string(f.size) + ", modified_ns=" + std::to_string(f.modified_ns) +
               ", changed_ns=" + std::to_string(f.changed_ns) + ")";
      });
  m.attr("SETTLED_NANOSECONDS") = kSettledNanoseconds;
  m.def("identity_settled", &settled, "identity"_a, "settle_ns"_a = kSettledNanoseconds,
        "Whether the identity's last change (ctime) is at least settle_ns before now.");
  m.def("file_identity", nb::overload_cast<const std::string&>(&file_identity), "path"_a,
        "The FileIdentity of the file at `path` (stat, following links); NotFoundError if there is none.");

  m.def("sha256_hex", [](nb::bytes data) {
    const char* bytes = data.c_str();
    const std::size_t size = data.size();
    nb::gil_scoped_release release;  // `data` is immutable and referenced for the whole call
    return digest_to_hex(sha256(bytes, size));
  }, "data"_a, "Lower-case hex SHA-256 of bytes, as hashlib.sha256(data).hexdigest().");

  m.def("crc32c", [](nb::ndarray<const std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> data,
                     std::uint32_t crc) {
    const auto* bytes = data.data();
    const std::size_t size = data.size();
    nb::gil_scoped_release release;  // the array is referenced for the whole call
    return crc32c(bytes, size, crc);
  }, "data"_a, "crc"_a = 0,
        "CRC-32C of a contiguous uint8 array (a torch tensor or numpy array viewed as bytes), continuing "
        "from `crc` (the CRC-32C of the bytes before it; 0 to start).");

  m.def("measure_read_modes",
        [](const std::string& path, std::uint64_t bytes_to_read,
           const std::optional<std::vector<std::tuple<std::string, std::int32_t, std::uint64_t>>>& candidates,
           std::int32_t rounds) {
          std::vector<ReadModeCandidate> chosen = default_read_mode_candidates();
          if (candidates) {
            chosen.clear();
            for (const auto& [mode, threads, request_bytes] : *candidates) {
              chosen.push_back({io_mode_from_name(mode), threads, request_bytes});
            }
          }
          nb::gil_scoped_release release;
          return measure_read_modes(path, bytes_to_read, chosen, rounds);
        },
        "path"_a, "bytes_to_read"_a, "candidates"_a = nb::none(), "rounds"_a = 1,
        "Times reading the first bytes_to_read bytes of path (page cache dropped before each) for every "
        "(mode, threads, request_bytes) candidate, every candidate once per round; each is judged by its median. "
        "Default candidates: buffered and direct x 1, 2, 4, 8 threads x 1, 4, 16 MiB.");
}

}  // namespace tt::bindings
