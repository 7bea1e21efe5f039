// The I/O engine: pieces of queued requests read (or written) by a thread pool, digests checked on arrival.
#include "tt/storage/io_engine.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>

#include "tt/common/crc32c.h"
#include "tt/common/error.h"
#include "tt/common/thread_name.h"

namespace tt {

// A submitted read or write. next_piece is guarded by the engine's mutex_; the rest as marked.
struct IoEngine::Request {
  bool writes = false;
  ReadRequest read;    // a read's fields (unused by a write)
  WriteRequest write;  // a write's fields (unused by a read)
  std::string name;    // the file as messages name it: the quoted path, or an open handle's own name
  // A read of the caller's open handle (a spill file's; `buffered` from submission on): never
  // opened or closed here. A write always uses the caller's, write.handle.
  bool borrowed = false;
  IoCallback on_done;
  CancelFlag cancel;
  std::uint64_t grid = 0;        // piece boundaries fall on multiples of this (file offsets)
  std::size_t piece_count = 0;
  std::size_t next_piece = 0;    // the next piece to hand out (engine mutex_)
  std::atomic<std::size_t> unfinished{0};  // pieces neither done nor skipped; 0: complete it
  std::atomic<bool> failed{false};         // set with `error`: later pieces are skipped

  std::mutex mutex;  // guards everything below
  std::exception_ptr error;
  int buffered = -1;           // handles opened by the first piece that needs them, closed on completion
  int direct = -1;
  bool direct_refused = false;  // Auto mode: O_DIRECT was refused, read the rest through the page cache
  bool sized = false;           // a read's first piece has checked the file's size
  std::uint64_t file_size = 0;
  FileIdentity opened_as;       // the file's identity before any piece was read

  std::uint64_t offset() const { return writes ? write.offset : read.offset; }
  std::uint64_t end() const { return offset() + (writes ? write.length : read.length); }
  std::uint64_t piece_begin(std::size_t index) const {
    return index == 0 ? offset() : (offset() / grid + index) * grid;
  }
  std::uint64_t piece_end(std::size_t index) const {
    return std::min((offset() / grid + index + 1) * grid, end());
  }
  void fail(std::exception_ptr cause) {
    std::lock_guard lock(mutex);
    if (!error) error = std::move(cause);  // the first error wins
    failed.store(true, std::memory_order_release);
  }
};

namespace {

bool aligned(std::uint64_t value) { return value % kDirectAlignment == 0; }

std::uint64_t address(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer); }

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::InvalidArgument, message); }

std::uint64_t elapsed_ns(std::chrono::steady_clock::time_point start) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

std::string_view io_mode_name(IoMode mode) {
  switch (mode) {
    case IoMode::Auto: return "auto";
    case IoMode::Buffered: return "buffered";
    case IoMode::Direct: return "direct";
  }
  return "unknown";
}

IoMode io_mode_from_name(std::string_view name) {
  for (IoMode mode : {IoMode::Auto, IoMode::Buffered, IoMode::Direct}) {
    if (io_mode_name(mode) == name) return mode;
  }
  invalid("IoEngine mode: expected 'auto', 'buffered' or 'direct', found '" + std::string(name) + "'");
}

IoEngine::IoEngine(IoEngineOptions options, std::shared_ptr<IoBackend> backend)
    : options_(options), backend_(std::move(backend)) {
  if (options_.threads < 1 || options_.threads > 1024) {
    invalid("IoEngine: threads must be in 1..1024, found " + std::to_string(options_.threads));
  }
  if (options_.queue_depth < 1) invalid("IoEngine: queue_depth must be >= 1, found " + std::to_string(options_.queue_depth));
  if (options_.chunk_bytes < 1) invalid("IoEngine: chunk_bytes must be >= 1, found 0");
  if (options_.mode == IoMode::Direct && !aligned(options_.chunk_bytes)) {
    invalid("IoEngine: in direct mode chunk_bytes must be a multiple of 4096, found " +
            std::to_string(options_.chunk_bytes));
  }
  if (!backend_) invalid("IoEngine: the backend is null");
  threads_.reserve(static_cast<std::size_t>(options_.threads));
  for (std::int32_t i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { worker_loop(); });
}

IoEngine::~IoEngine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void IoEngine::submit(ReadRequest read, IoCallback on_done, CancelFlag cancel) {
  if (!on_done) invalid("IoEngine::submit '" + read.path + "': on_done is empty");
  if (read.destination == nullptr && read.length > 0) invalid("IoEngine::submit '" + read.path + "': no destination");
  if (read.offset > std::numeric_limits<std::uint64_t>::max() - read.length) {
    invalid("IoEngine::submit '" + read.path + "': offset " + std::to_string(read.offset) + " + length " +
            std::to_string(read.length) + " overflows");
  }
  if (read.digests && read.digests->chunk_bytes == 0) invalid("IoEngine::submit '" + read.path + "': digest chunk_bytes is 0");
  if (options_.mode == IoMode::Direct && (read.handle < 0 || read.named) && read.length > 0 &&
      !aligned(address(read.destination) - read.offset)) {
    invalid("IoEngine::submit '" + read.path + "': direct mode needs the destination and the offset " +
            std::to_string(read.offset) + " equal modulo 4096");
  }
  auto request = std::make_shared<Request>();
  request->name = read.handle >= 0 && !read.named ? read.path : "'" + read.path + "'";
  if (read.handle >= 0) {
    request->buffered = read.handle;
    request->borrowed = true;
  }
  const std::uint64_t grid = read.digests ? read.digests->chunk_bytes : options_.chunk_bytes;
  request->read = std::move(read);
  request->on_done = std::move(on_done);
  request->cancel = std::move(cancel);
  enqueue(std::move(request), grid);
}

void IoEngine::submit_write(WriteRequest write, IoCallback on_done, CancelFlag cancel) {
  const std::string who = "IoEngine::submit_write (" + write.name + ")";
  if (!on_done) invalid(who + ": on_done is empty");
  if (write.handle < 0) invalid(who + ": no handle");
  if (write.source == nullptr && write.length > 0) invalid(who + ": no source");
  if (write.offset > std::numeric_limits<std::uint64_t>::max() - write.length) {
    invalid(who + ": offset " + std::to_string(write.offset) + " + length " + std::to_string(write.length) +
            " overflows");
  }
  auto request = std::make_shared<Request>();
  request->writes = true;
  request->name = write.name;
  request->write = std::move(write);
  request->on_done = std::move(on_done);
  request->cancel = std::move(cancel);
  enqueue(std::move(request), options_.chunk_bytes);
}

void IoEngine::enqueue(std::shared_ptr<Request> request, std::uint64_t grid) {
  request->grid = grid;
  const std::uint64_t begin = request->offset(), end = request->end();
  if (end > begin) request->piece_count = static_cast<std::size_t>((end - 1) / grid - begin / grid + 1);
  request->unfinished.store(request->piece_count, std::memory_order_relaxed);
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(request));
  }
  wake_.notify_one();
}

void IoEngine::read(ReadRequest request, CancelFlag cancel) {
  // Not a std::promise: its shared state, released by the callback on the I/O thread after the
  // caller woke, could drop the last reference to the error there. Here the caller moves the error
  // out under the mutex, so every reference to it changes hands in order.
  struct Completion {
    std::mutex mutex;
    std::condition_variable done_changed;
    bool done = false;
    std::exception_ptr error;
  };
  auto completion = std::make_shared<Completion>();
  submit(std::move(request), [completion](std::exception_ptr error) {
    std::lock_guard lock(completion->mutex);
    completion->error = std::move(error);
    completion->done = true;
    completion->done_changed.notify_one();
  }, std::move(cancel));
  std::exception_ptr error;
  {
    std::unique_lock lock(completion->mutex);
    completion->done_changed.wait(lock, [&] { return completion->done; });
    error = std::move(completion->error);
  }
  if (error) std::rethrow_exception(std::move(error));
}

IoStats IoEngine::stats() const {
  IoStats stats;
  stats.requests = requests_.load(std::memory_order_relaxed);
  stats.failed_requests = failed_requests_.load(std::memory_order_relaxed);
  stats.pieces = pieces_.load(std::memory_order_relaxed);
  stats.direct_bytes = direct_bytes_.load(std::memory_order_relaxed);
  stats.buffered_bytes = buffered_bytes_.load(std::memory_order_relaxed);
  stats.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  stats.bytes_read = stats.direct_bytes + stats.buffered_bytes;
  stats.chunks_verified = chunks_verified_.load(std::memory_order_relaxed);
  stats.ranges_checksummed = ranges_checksummed_.load(std::memory_order_relaxed);
  stats.busy_seconds = static_cast<double>(busy_ns_.load(std::memory_order_relaxed)) * 1e-9;
  stats.digest_seconds = static_cast<double>(digest_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return stats;
}

std::string IoEngine::direct_fallback_reason() const {
  std::lock_guard lock(reason_mutex_);
  return fallback_reason_;
}

void IoEngine::note_fallback(const std::string& reason) {
  if (has_fallback_reason_.load(std::memory_order_acquire)) return;  // the common case: no lock
  std::lock_guard lock(reason_mutex_);
  if (fallback_reason_.empty()) fallback_reason_ = reason;
  has_fallback_reason_.store(true, std::memory_order_release);
}

void IoEngine::worker_loop() {
  name_this_thread("tt-io");
  std::vector<Finished> finished;
  for (;;) {
    std::shared_ptr<Request> request;
    std::size_t index = 0;
    bool keep_going = false;
    {
      std::unique_lock lock(mutex_);
      keep_going = next_work(lock, request, index, finished);
    }
    // Completions run outside the lock: a callback may submit more work.
    for (const Finished& done : finished) finish(done);
    finished.clear();
    if (request) {
      if (request->writes) {
        write_piece(*request, index);
      } else {
        read_piece(*request, index);
      }
      {
        std::lock_guard lock(mutex_);
        --in_flight_;
      }
      wake_.notify_one();
      finish({std::move(request), 1});
    }
    if (!keep_going) return;
  }
}

bool IoEngine::next_work(std::unique_lock<std::mutex>& lock, std::shared_ptr<Request>& request, std::size_t& index,
                         std::vector<Finished>& finished) {
  for (;;) {
    // Requests that failed, were cancelled or have nothing to read give up their remaining pieces
    // here, before any of those pieces starts. On shutdown that is every queued request.
    while (!queue_.empty()) {
      Request& front = *queue_.front();
      const bool cancelled = stopping_ || (front.cancel && front.cancel->load(std::memory_order_acquire));
      if (!cancelled && !front.failed.load(std::memory_order_acquire) && front.next_piece < front.piece_count) break;
      if (cancelled) {
        front.fail(std::make_exception_ptr(
            Error(ErrorCode::Cancelled, (front.writes ? "write of " : "read of ") + front.name + " at offset " +
                                            std::to_string(front.offset()) +
                                            (stopping_ ? ": the I/O engine was destroyed" : ": cancelled"))));
      }
      finished.push_back({queue_.front(), front.piece_count - front.next_piece});
      front.next_piece = front.piece_count;
      queue_.pop_front();
    }
    if (!finished.empty()) return true;  // complete those first, then come back
    if (stopping_) return false;         // queue empty: pieces in flight finish on their own threads
    if (!queue_.empty() && in_flight_ < options_.queue_depth) {
      request = queue_.front();
      index = request->next_piece++;
      if (request->next_piece == request->piece_count) queue_.pop_front();
      ++in_flight_;
      // submit() wakes one thread; each thread that takes a piece wakes the next while pieces
      // remain, so a many-piece request spreads over the pool.
      if (!queue_.empty() && in_flight_ < options_.queue_depth) wake_.notify_one();
      return true;
    }
    wake_.wait(lock);
  }
}

void IoEngine::finish(const Finished& done) {
  Request& request = *done.request;
  if (request.unfinished.fetch_sub(done.pieces, std::memory_order_acq_rel) != done.pieces) return;
  // Last piece: nothing else touches the request now.
  const RangeTrust* trust = request.read.trust.get();
  const std::optional<FileIdentity> read_from = trust ? identity_read(request) : std::nullopt;
  const bool check_crc = !request.error && request.read.range_crc32c && !(read_from && trust->trusts(*read_from));
  if (request.buffered >= 0 && !request.borrowed) backend_->close(request.buffered);
  if (request.direct >= 0) backend_->close(request.direct);
  request.buffered = request.direct = -1;
  if (check_crc) {
    ranges_checksummed_.fetch_add(1, std::memory_order_relaxed);
    if (crc32c(request.read.destination, request.read.length) != *request.read.range_crc32c) {
      request.error = std::make_exception_ptr(Error(
          ErrorCode::DataCorruption, request.read.path + ": bytes [" + std::to_string(request.read.offset) + ", " +
                                         std::to_string(request.end()) + ") fail their crc32c checksum"));
    } else if (read_from == request.opened_as) {  // and nothing wrote the file while it was read
      request.read.trust->found_good(*read_from);
    }
  }
  requests_.fetch_add(1, std::memory_order_relaxed);
  if (request.error) failed_requests_.fetch_add(1, std::memory_order_relaxed);
  // Both moved out: whatever the callback holds is released before the next request starts, and
  // the error travels to the caller without this thread keeping a reference to it (a caller that
  // moves it on leaves this thread nothing to release after the caller has woken).
  IoCallback on_done = std::move(request.on_done);
  std::exception_ptr error = std::move(request.error);
  on_done(std::move(error));
}

// The identity of the file every handle of `request` read, taken once its bytes are in; none
// where the handles disagree (the file was replaced midway) or fstat fails: check the bytes.
std::optional<FileIdentity> IoEngine::identity_read(const Request& request) noexcept {
  if (request.buffered < 0) return std::nullopt;
  try {
    const FileIdentity identity = backend_->identity(request.buffered);
    if (request.direct >= 0 && backend_->identity(request.direct) != identity) return std::nullopt;
    return identity;
  } catch (...) {
    return std::nullopt;
  }
}

int IoEngine::direct_handle(Request& request) {
  std::lock_guard lock(request.mutex);
  if (request.direct < 0 && !request.direct_refused) {
    try {
      // A held handle is reopened as itself: its path may name another file by now.
      const std::string& path = request.borrowed ? "/proc/self/fd/" + std::to_string(request.buffered) : request.read.path;
      request.direct = backend_->open(path, true);
    } catch (const Error& error) {
      if (error.code() != ErrorCode::Incompatible || options_.mode == IoMode::Direct) throw;
      request.direct_refused = true;
      note_fallback(error.what());
    }
  }
  return request.direct;  // -1 when refused
}

void IoEngine::read_range(Request& request, char* out, std::uint64_t begin, std::uint64_t end) {
  const std::string& path = request.read.path;
  // Pieces whose memory and file offset are aligned alike read their 4096-aligned middle with
  // O_DIRECT and their unaligned head and tail (each < 4096 bytes) through the page cache. A
  // borrowed handle of an anonymous spill file has no name to reopen with O_DIRECT.
  const bool may_go_direct = options_.mode != IoMode::Buffered && (!request.borrowed || request.read.named);
  bool direct_ok = may_go_direct && aligned(address(out) - begin);
  if (options_.mode == IoMode::Auto && may_go_direct && !direct_ok && end - begin >= kDirectAlignment &&
      !has_fallback_reason_.load(std::memory_order_relaxed)) {
    note_fallback("'" + path + "': destination and file offset are not aligned alike modulo 4096 (offset " +
                  std::to_string(begin) + ")");
  }
  int buffered = 0;
  {
    std::lock_guard lock(request.mutex);
    buffered = request.buffered;
    direct_ok = direct_ok && !request.direct_refused;
  }
  for (std::uint64_t at = begin; at < end;) {
    const std::uint64_t remaining = end - at;
    const bool direct = direct_ok && aligned(at) && remaining >= kDirectAlignment;
    std::uint64_t length = remaining;
    if (direct) {
      length = remaining / kDirectAlignment * kDirectAlignment;
    } else if (direct_ok) {
      length = std::min(remaining, kDirectAlignment - at % kDirectAlignment);  // up to the next aligned offset
    }
    const int handle = direct ? direct_handle(request) : buffered;
    if (handle < 0) {  // O_DIRECT refused at open (Auto): the page cache from now on
      direct_ok = false;
      continue;
    }
    const ssize_t got = backend_->pread(handle, out, static_cast<std::size_t>(length), at);
    if (got == -EINTR) continue;
    if (got == -EINVAL && direct && options_.mode == IoMode::Auto) {
      // Some filesystems accept O_DIRECT at open and refuse it per read.
      note_fallback("'" + path + "': O_DIRECT read refused (" + std::strerror(EINVAL) + ")");
      std::lock_guard lock(request.mutex);
      request.direct_refused = true;
      direct_ok = false;
      continue;
    }
    if (got < 0) {
      throw Error(ErrorCode::IO, "read " + request.name + " at offset " + std::to_string(at) + ", length " +
                                     std::to_string(length) + (direct ? " (O_DIRECT)" : "") + ": " +
                                     std::strerror(static_cast<int>(-got)));
    }
    if (got == 0) {
      throw Error(ErrorCode::DataCorruption, request.name + ": file ends at byte " + std::to_string(at) +
                                                 ", expected at least " + std::to_string(request.end()));
    }
    (direct ? direct_bytes_ : buffered_bytes_).fetch_add(static_cast<std::uint64_t>(got), std::memory_order_relaxed);
    at += static_cast<std::uint64_t>(got);
    out += got;
  }
}

void IoEngine::read_piece(Request& request, std::size_t index) {
  if (request.failed.load(std::memory_order_acquire)) return;  // an earlier piece failed: skip
  try {
    const std::string& path = request.read.path;
    const FileDigests* digests = request.read.digests.get();
    std::uint64_t file_size = 0;
    {
      // The first piece opens the file (unless borrowed) and checks its size, once for the whole request.
      std::lock_guard lock(request.mutex);
      if (!request.sized) {
        if (request.buffered < 0) request.buffered = backend_->open(path, false);
        request.sized = true;
        request.opened_as = backend_->identity(request.buffered);
        request.file_size = request.opened_as.size;
        if (request.file_size < request.end()) {
          throw Error(ErrorCode::DataCorruption, request.name + ": file ends at byte " +
                                                     std::to_string(request.file_size) + ", expected at least " +
                                                     std::to_string(request.end()));
        }
        const std::uint64_t chunks = digests ? (request.file_size + digests->chunk_bytes - 1) / digests->chunk_bytes : 0;
        if (digests && chunks != digests->chunks.size()) {
          throw Error(ErrorCode::DataCorruption, request.name + ": " + std::to_string(request.file_size) +
                                                     " bytes make " + std::to_string(chunks) + " chunks of " +
                                                     std::to_string(digests->chunk_bytes) + " bytes, the digest list has " +
                                                     std::to_string(digests->chunks.size()));
        }
      }
      file_size = request.file_size;
    }
    const std::uint64_t begin = request.piece_begin(index), end = request.piece_end(index);
    char* out = static_cast<char*>(request.read.destination) + (begin - request.read.offset);
    const auto start = std::chrono::steady_clock::now();
    read_range(request, out, begin, end);
    busy_ns_.fetch_add(elapsed_ns(start), std::memory_order_relaxed);
    pieces_.fetch_add(1, std::memory_order_relaxed);

    // Pieces follow the digest grid, so a piece is either one whole chunk or part of one.
    if (digests && begin % digests->chunk_bytes == 0 && (end - begin == digests->chunk_bytes || end == file_size)) {
      const std::uint64_t chunk = begin / digests->chunk_bytes;
      const auto hash_start = std::chrono::steady_clock::now();
      const Sha256Digest found = sha256(out, static_cast<std::size_t>(end - begin));
      digest_ns_.fetch_add(elapsed_ns(hash_start), std::memory_order_relaxed);
      const Sha256Digest& expected = digests->chunks[static_cast<std::size_t>(chunk)];
      if (found != expected) {
        throw Error(ErrorCode::DataCorruption, request.name + ": chunk " + std::to_string(chunk) + " (file bytes " +
                                                   std::to_string(begin) + ".." + std::to_string(end) +
                                                   ") has sha256 " + digest_to_hex(found) + ", expected " +
                                                   digest_to_hex(expected));
      }
      chunks_verified_.fetch_add(1, std::memory_order_relaxed);
    }
  } catch (...) {
    request.fail(std::current_exception());
  }
}

void IoEngine::write_piece(Request& request, std::size_t index) {
  if (request.failed.load(std::memory_order_acquire)) return;  // an earlier piece failed: skip
  try {
    const std::uint64_t begin = request.piece_begin(index), end = request.piece_end(index);
    const char* from = static_cast<const char*>(request.write.source) + (begin - request.offset());
    const auto start = std::chrono::steady_clock::now();
    for (std::uint64_t at = begin; at < end;) {
      const std::uint64_t length = end - at;
      const ssize_t wrote = backend_->pwrite(request.write.handle, from, static_cast<std::size_t>(length), at);
      if (wrote == -EINTR) continue;
      if (wrote <= 0) {  // pwrite(2) returns 0 for a non-empty range only on failure; retrying would spin
        throw Error(ErrorCode::IO, "write " + request.name + " at offset " + std::to_string(at) + ", length " +
                                       std::to_string(length) + ": " +
                                       (wrote < 0 ? std::strerror(static_cast<int>(-wrote)) : "nothing written"));
      }
      bytes_written_.fetch_add(static_cast<std::uint64_t>(wrote), std::memory_order_relaxed);
      at += static_cast<std::uint64_t>(wrote);
      from += wrote;
    }
    busy_ns_.fetch_add(elapsed_ns(start), std::memory_order_relaxed);
    pieces_.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {
    request.fail(std::current_exception());
  }
}

}  // namespace tt
