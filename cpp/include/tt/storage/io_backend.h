// The seam between the I/O engine and the operating system: POSIX reads, or faults injected for tests.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tt {

// Opens, reads and closes files on behalf of an IoEngine. Implementations must be thread-safe:
// the engine's I/O threads call every method concurrently, also on one handle.
class IoBackend {
 public:
  virtual ~IoBackend() = default;

  // Opens `path` read-only; `direct` asks for O_DIRECT (page-cache bypass). Returns a handle >= 0
  // that the caller owns and must pass to close() once. Throws Error(NotFound) when the path does
  // not exist, Error(Incompatible) when `direct` is asked and the filesystem refuses O_DIRECT
  // (EINVAL: tmpfs and some network filesystems), Error(IO) naming the path and the OS reason otherwise.
  virtual int open(const std::string& path, bool direct) = 0;

  // Reads up to `length` bytes at file `offset` into `destination` (borrowed for the call).
  // Returns the byte count (0 at the end of the file; less than asked is legal) or -errno.
  // Never throws, so that the caller decides what each failure means.
  virtual ssize_t pread(int handle, void* destination, std::size_t length, std::uint64_t offset) noexcept = 0;

  // Releases a handle from open(). Never throws.
  virtual void close(int handle) noexcept = 0;

  // Size of the open file in bytes. Throws Error(IO) with the OS reason.
  virtual std::uint64_t file_size(int handle) = 0;
};

// The real thing: open(2) with O_RDONLY | O_CLOEXEC (| O_DIRECT), pread(2), close(2), fstat(2).
// Handles are file descriptors. Stateless, so trivially thread-safe.
class PosixIoBackend final : public IoBackend {
 public:
  int open(const std::string& path, bool direct) override;
  ssize_t pread(int handle, void* destination, std::size_t length, std::uint64_t offset) noexcept override;
  void close(int handle) noexcept override;
  std::uint64_t file_size(int handle) override;
};

// What FaultInjectingIoBackend does to the preads it picks.
enum class IoFault {
  None,       // pass every call through (with FaultPlan::delay_s, a slow disk)
  Eio,        // fail with -EIO
  Enospc,     // fail with -ENOSPC (meant for writes, once the engine writes)
  ShortRead,  // read half the asked length (at least one byte): legal, and callers must retry
};

// When and how a FaultInjectingIoBackend misbehaves.
struct FaultPlan {
  IoFault fault = IoFault::None;
  std::int64_t at_call = 1;   // the 1-based pread call (counted across all threads) that gets the fault
  bool repeat = false;        // also every call after at_call
  double delay_s = 0;         // sleep before every pread (>= 0), to make reads slow in tests
};

// Wraps another backend and injects the faults of a FaultPlan into its preads; open, close and
// file_size pass through. Thread-safe: the call counter is atomic, so "the Nth call" is
// well-defined when several threads read at once. Shares ownership of the wrapped backend.
class FaultInjectingIoBackend final : public IoBackend {
 public:
  // Throws Error(InvalidArgument) for a null backend, at_call < 1 or a negative or non-finite delay.
  FaultInjectingIoBackend(std::shared_ptr<IoBackend> inner, FaultPlan plan);

  int open(const std::string& path, bool direct) override { return inner_->open(path, direct); }
  ssize_t pread(int handle, void* destination, std::size_t length, std::uint64_t offset) noexcept override;
  void close(int handle) noexcept override { inner_->close(handle); }
  std::uint64_t file_size(int handle) override { return inner_->file_size(handle); }

  // pread calls so far, faulty or not.
  std::int64_t pread_calls() const noexcept { return calls_.load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<IoBackend> inner_;
  FaultPlan plan_;
  std::atomic<std::int64_t> calls_{0};
};

}  // namespace tt
