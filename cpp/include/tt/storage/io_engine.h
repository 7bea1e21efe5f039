// Reads byte ranges of files into caller memory on a pool of I/O threads, checking chunk digests as
// they arrive, and writes spill files the same way.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tt/common/sha256.h"
#include "tt/storage/io_backend.h"

namespace tt {

// O_DIRECT needs the memory address, the file offset and the length to be multiples of the
// device's logical block size; 4096 satisfies every common one.
inline constexpr std::uint64_t kDirectAlignment = 4096;

// The artifact's digest chunk (integrity.json "chunk_size"), and the default piece size.
inline constexpr std::uint64_t kDefaultChunkBytes = std::uint64_t{16} << 20;

// Whether reads bypass the page cache.
enum class IoMode {
  Auto,      // O_DIRECT for the 4096-aligned part of a piece where the filesystem takes it, page cache otherwise
  Buffered,  // always through the page cache
  Direct,    // O_DIRECT for every aligned part; a filesystem refusing it fails the request (Incompatible)
};

// "auto", "buffered" or "direct".
std::string_view io_mode_name(IoMode mode);

// Inverse of io_mode_name. Throws Error(InvalidArgument) quoting an unknown name.
IoMode io_mode_from_name(std::string_view name);

struct IoEngineOptions {
  std::int32_t threads = 4;                      // I/O threads, 1..1024
  std::int32_t queue_depth = 8;                  // pieces in flight per engine (all requests together), >= 1
  std::uint64_t chunk_bytes = kDefaultChunkBytes;  // piece size of requests without digests; >= 1, a
                                                 // multiple of kDirectAlignment in Direct mode
  IoMode mode = IoMode::Auto;
};

// A file's digest grid, as integrity.json records it: chunk i covers file bytes
// [i * chunk_bytes, min((i + 1) * chunk_bytes, file size)), so the list has ceil(size / chunk_bytes)
// entries (none for an empty file). Immutable once shared.
struct FileDigests {
  std::uint64_t chunk_bytes = kDefaultChunkBytes;  // > 0
  std::vector<Sha256Digest> chunks;                // the digest of every chunk of the whole file
};

// What the loads of one file range share across calls: the identity its file had when its
// bytes were last found good (by their CRC-32C, or by the caller reading the file whole).
// A load that finds the file so skips the pass over its bytes. A write moves a file's times
// before it changes a byte, and a replacement changes the inode, so no change a read could
// see escapes an identity taken after it; loads then check again, until one finds the bytes
// good in a file settled anew. Thread-safe.
class RangeTrust {
 public:
  // `known_good`: an identity the caller vouches for (read whole and settled); `settle_ns`: how
  // long a file must be unchanged before a good read vouches for it (see kSettledNanoseconds).
  explicit RangeTrust(std::optional<FileIdentity> known_good = std::nullopt,
                      std::int64_t settle_ns = kSettledNanoseconds)
      : settle_ns_(settle_ns), known_good_(known_good) {}

  bool trusts(const FileIdentity& identity) const {
    std::lock_guard lock(mutex_);
    return known_good_ == identity;
  }

  // The range's bytes were found good in a file of `identity`: vouched for if it is settled.
  void found_good(const FileIdentity& identity) {
    if (!settled(identity, settle_ns_)) return;
    std::lock_guard lock(mutex_);
    known_good_ = identity;
  }

 private:
  const std::int64_t settle_ns_;
  mutable std::mutex mutex_;
  std::optional<FileIdentity> known_good_;
};

// One read: file bytes [offset, offset + length) of `path` into `destination`.
struct ReadRequest {
  std::string path;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  // Caller-owned, at least `length` bytes, untouched by the caller and valid until on_done runs.
  // Bytes of a failed request are unspecified.
  void* destination = nullptr;
  // The file's digest grid, or null for no checks. With digests, pieces follow that grid, and each
  // chunk the request covers whole is checked; a chunk covered only in part is left unchecked (a
  // caller wanting every byte checked aligns its reads to the grid).
  std::shared_ptr<const FileDigests> digests;
  // The CRC-32C of the whole range, checked once every piece has arrived (a load of one
  // tensor checks its own bytes, whatever the chunk grid); absent: not checked.
  std::optional<std::uint32_t> range_crc32c = std::nullopt;
  // With `range_crc32c`, the range's trust, shared by its loads: once the bytes are in, the
  // identity of the file every handle read is taken; where the trust vouches for it, the
  // checksum pass is skipped, else it runs and, passing in a file that kept the identity it had
  // before the first piece was read, tells the trust. Null: every read checks.
  std::shared_ptr<RangeTrust> trust = nullptr;
  // >= 0: read this open handle (a spill file's or a HeldFile's, which the caller owns and
  // keeps open until on_done runs) instead of opening `path`; `path` then only names the file
  // in messages (SpillFile::name(), or the held file's path).
  int handle = -1;
  // With `handle`: false for an anonymous file (a spill file's), read through the page cache
  // whatever the mode; true for a named file held open (HeldFile), which messages quote like
  // `path` and whose O_DIRECT reads reopen the handle itself through /proc/self/fd, never the
  // path (which may name another file by now).
  bool named = false;
};

// One write: `length` bytes of `source` to file bytes [offset, offset + length) of an open handle.
struct WriteRequest {
  int handle = -1;               // from IoBackend::open_for_spill; caller-owned, open until on_done runs
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  const void* source = nullptr;  // caller-owned, at least `length` bytes, unchanged until on_done runs
  std::string name;              // how messages name the file: "the spill file in '/dir'"
};

// Shared between a caller and its requests: set to true to cancel them. Checked before each piece.
using CancelFlag = std::shared_ptr<std::atomic<bool>>;

// Called exactly once per submitted request, on an I/O thread, with null or the request's first
// error. Must not throw (std::terminate), block on other requests of the same engine, or destroy it.
using IoCallback = std::function<void(std::exception_ptr error)>;

// Telemetry of an engine since it was constructed (a snapshot of atomic counters).
struct IoStats {
  std::uint64_t requests = 0;         // completed requests, successful or not
  std::uint64_t failed_requests = 0;  // of which completed with an error (cancelled included)
  std::uint64_t pieces = 0;           // pieces read or written (skipped ones not counted)
  std::uint64_t bytes_read = 0;       // direct_bytes + buffered_bytes
  std::uint64_t direct_bytes = 0;     // read with O_DIRECT
  std::uint64_t buffered_bytes = 0;   // read through the page cache
  std::uint64_t bytes_written = 0;    // by write requests
  std::uint64_t chunks_verified = 0;  // whole chunks whose digest matched
  std::uint64_t ranges_checksummed = 0;  // reads whose range's CRC-32C was computed (not skipped as trusted)
  double busy_seconds = 0;            // sum over pieces of the time spent in reads and writes
  double digest_seconds = 0;          // sum over pieces of the time spent hashing
};

// Owns its I/O threads: spawned in the constructor, joined in the destructor. submit(),
// submit_write() and the accessors are thread-safe. Requests (reads and writes) are served in
// submission order, each split into pieces at multiples of its piece grid (a read's digests'
// chunk_bytes, else options.chunk_bytes); any I/O thread may read or write any piece, so the
// pieces of one request run concurrently, and queue_depth bounds reads and writes together. No
// I/O thread ever waits for a request: a request completes on whichever thread finishes its
// last piece.
class IoEngine {
 public:
  // Throws Error(InvalidArgument) for bad options or a null backend. The engine shares the
  // backend (PosixIoBackend unless a test injects another).
  explicit IoEngine(IoEngineOptions options, std::shared_ptr<IoBackend> backend = std::make_shared<PosixIoBackend>());

  // Waits for the pieces in flight, then completes every request still queued with
  // Error(Cancelled) (on the I/O threads, like every completion) and joins the threads.
  ~IoEngine();
  IoEngine(const IoEngine&) = delete;
  IoEngine& operator=(const IoEngine&) = delete;

  // Queues `request` and returns at once; `on_done` runs later exactly once (see IoCallback).
  // Errors passed to it: Error(NotFound) or Error(IO) (path, offset, length, OS reason) when opening
  // or reading fails; Error(DataCorruption) when the file is shorter than offset + length, its size
  // disagrees with the digest list, or a chunk's digest differs (path, chunk, offsets);
  // Error(Incompatible) in Direct mode on a filesystem refusing O_DIRECT; Error(Cancelled) when
  // `cancel` was set before a piece was started or the engine was destroyed first. After the first
  // error the request's remaining pieces are skipped. Throws Error(InvalidArgument), without
  // calling on_done, for a malformed request: no destination, offset + length overflowing, a zero
  // digest chunk, or (Direct mode, reading a path) a destination and offset not equal modulo
  // kDirectAlignment.
  void submit(ReadRequest request, IoCallback on_done, CancelFlag cancel = nullptr);

  // Queues a write and returns at once; `on_done` runs later exactly once (see IoCallback). Each
  // piece is written with pwrite calls that retry short writes and EINTR. Errors passed to
  // on_done: Error(IO) naming the file (request.name), the offset, the length and the OS reason
  // ("No space left on device" when the disk is full); Error(Cancelled) as for submit(). After
  // the first error the remaining pieces are skipped; the bytes written are then unspecified.
  // Throws Error(InvalidArgument), without calling on_done, for no handle, no source, or offset +
  // length overflowing.
  void submit_write(WriteRequest request, IoCallback on_done, CancelFlag cancel = nullptr);

  // submit() and wait: returns when the request completed, rethrowing its error. Blocks the
  // calling thread, which must not be one of this engine's (an on_done callback).
  void read(ReadRequest request, CancelFlag cancel = nullptr);

  // Counters so far; each is exact, the set is not one atomic snapshot.
  IoStats stats() const;

  // Why Auto mode first read through the page cache instead of O_DIRECT (a filesystem refusing
  // it, or a request whose destination and offset are not aligned alike); empty if it never did.
  // Recorded once per engine so that callers can log it once.
  std::string direct_fallback_reason() const;

  // The options the engine was built with.
  const IoEngineOptions& options() const noexcept { return options_; }

  // The backend every request goes through; spill files are opened with it, so that a test's
  // faults reach them too.
  const std::shared_ptr<IoBackend>& backend() const noexcept { return backend_; }

 private:
  struct Request;  // a submitted request's state, private to io_engine.cc
  struct Finished {
    std::shared_ptr<Request> request;
    std::size_t pieces;  // pieces to mark finished (skipped or just done)
  };

  // Splits `request` into pieces on `grid` and queues it.
  void enqueue(std::shared_ptr<Request> request, std::uint64_t grid);
  void worker_loop();
  // Takes the next piece to read or write into `request`/`index`, or collects skipped requests into
  // `finished`; returns false when the thread should exit. Called with mutex_ held.
  bool next_work(std::unique_lock<std::mutex>& lock, std::shared_ptr<Request>& request, std::size_t& index,
                 std::vector<Finished>& finished);
  void read_piece(Request& request, std::size_t index);
  void write_piece(Request& request, std::size_t index);
  void read_range(Request& request, char* out, std::uint64_t begin, std::uint64_t end);
  int direct_handle(Request& request);
  void finish(const Finished& finished);
  std::optional<FileIdentity> identity_read(const Request& request) noexcept;
  void note_fallback(const std::string& reason);

  const IoEngineOptions options_;
  const std::shared_ptr<IoBackend> backend_;

  std::mutex mutex_;  // guards queue_, in_flight_, stopping_ and every queued Request's next_piece
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Request>> queue_;  // requests with pieces not yet started
  std::int32_t in_flight_ = 0;
  bool stopping_ = false;

  mutable std::mutex reason_mutex_;
  std::string fallback_reason_;  // guarded by reason_mutex_
  std::atomic<bool> has_fallback_reason_{false};

  std::atomic<std::uint64_t> requests_{0}, failed_requests_{0}, pieces_{0}, direct_bytes_{0}, buffered_bytes_{0},
      bytes_written_{0}, chunks_verified_{0}, ranges_checksummed_{0}, busy_ns_{0}, digest_ns_{0};

  std::vector<std::thread> threads_;  // last member: started once everything above is constructed
};

}  // namespace tt
