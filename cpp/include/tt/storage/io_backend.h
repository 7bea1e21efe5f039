// The seam between the I/O engine and the operating system: POSIX reads and spill files, or faults injected for tests.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tt/common/file_identity.h"

namespace tt {

// Opens, reads, writes and closes files on behalf of an IoEngine. Implementations must be
// thread-safe: the engine's I/O threads call every method concurrently, also on one handle.
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

  // Creates an anonymous file in `directory` for spilled bytes, open for reading and writing:
  // O_TMPFILE where the filesystem supports it, else create_unlinked_spill_file. No name of it
  // stays in the directory, so nothing is left behind when it is closed or the process dies
  // (with the fallback, except by a crash in the instant between its create and unlink).
  // Returns a handle the caller owns and must pass to close() once. Throws Error(NotFound) when
  // the directory does not exist, Error(IO) naming it and the OS reason otherwise.
  virtual int open_for_spill(const std::string& directory) = 0;

  // Writes up to `length` bytes of `source` (borrowed for the call) at file `offset` of a
  // handle from open_for_spill. Returns the byte count (less than asked is legal) or -errno.
  // Never throws, so that the caller decides what each failure means.
  virtual ssize_t pwrite(int handle, const void* source, std::size_t length, std::uint64_t offset) noexcept = 0;

  // Empties a handle from open_for_spill() (its size becomes 0), giving its blocks back to
  // the filesystem. Returns 0 or -errno. Never throws.
  virtual int truncate(int handle) noexcept = 0;

  // Releases a handle from open() or open_for_spill(). Never throws.
  virtual void close(int handle) noexcept = 0;

  // The open file's identity (its size among it). Throws Error(IO) with the OS reason.
  virtual FileIdentity identity(int handle) = 0;
};

// The real thing: open(2) with O_RDONLY | O_CLOEXEC (| O_DIRECT), pread(2), pwrite(2),
// close(2), fstat(2); spill files with O_TMPFILE | O_RDWR | O_CLOEXEC, mode 0600. Handles are
// file descriptors. Stateless, so trivially thread-safe.
class PosixIoBackend final : public IoBackend {
 public:
  int open(const std::string& path, bool direct) override;
  ssize_t pread(int handle, void* destination, std::size_t length, std::uint64_t offset) noexcept override;
  int open_for_spill(const std::string& directory) override;
  ssize_t pwrite(int handle, const void* source, std::size_t length, std::uint64_t offset) noexcept override;
  int truncate(int handle) noexcept override;
  void close(int handle) noexcept override;
  FileIdentity identity(int handle) override;
};

// open_for_spill's fallback where the filesystem (or kernel) lacks O_TMPFILE: mkostemp of
// "tt-spill-XXXXXX" in `directory`, unlinked at once. Public so that tests cover it on
// filesystems that have O_TMPFILE. Errors as open_for_spill.
int create_unlinked_spill_file(const std::string& directory);

// What FaultInjectingIoBackend does to the calls it picks.
enum class IoFault {
  None,    // pass every call through (with FaultPlan::delay_s, a slow disk)
  Eio,     // fail with -EIO
  Enospc,  // fail with -ENOSPC (a full disk, for writes)
  Short,   // read or write half the asked length (at least one byte): legal, and callers must retry
};

// When and how a FaultInjectingIoBackend misbehaves. preads and pwrites are counted apart, so
// at_call = 2 means the second pread and the second pwrite, each among the calls planned.
struct FaultPlan {
  IoFault fault = IoFault::None;
  std::int64_t at_call = 1;   // the 1-based call (counted across all threads) that gets the fault
  bool repeat = false;        // also every call after at_call
  double delay_s = 0;         // sleep before every planned call (>= 0), to make a disk slow in tests
  bool reads = true;          // the plan (fault and delay) applies to preads
  bool writes = true;         // and to pwrites
};

// Wraps another backend and injects the faults of a FaultPlan into its preads and pwrites;
// open, open_for_spill, close and identity pass through. Thread-safe: the call counters are
// atomic, so "the Nth call" is well-defined when several threads read or write at once. Shares
// ownership of the wrapped backend.
class FaultInjectingIoBackend final : public IoBackend {
 public:
  // Throws Error(InvalidArgument) for a null backend, at_call < 1 or a negative or non-finite delay.
  FaultInjectingIoBackend(std::shared_ptr<IoBackend> inner, FaultPlan plan);

  int open(const std::string& path, bool direct) override { return inner_->open(path, direct); }
  ssize_t pread(int handle, void* destination, std::size_t length, std::uint64_t offset) noexcept override;
  int open_for_spill(const std::string& directory) override { return inner_->open_for_spill(directory); }
  ssize_t pwrite(int handle, const void* source, std::size_t length, std::uint64_t offset) noexcept override;
  int truncate(int handle) noexcept override { return inner_->truncate(handle); }
  void close(int handle) noexcept override { inner_->close(handle); }
  FileIdentity identity(int handle) override { return inner_->identity(handle); }

  // pread and pwrite calls so far, faulty or not (planned or not).
  std::int64_t pread_calls() const noexcept { return read_calls_.load(std::memory_order_relaxed); }
  std::int64_t pwrite_calls() const noexcept { return write_calls_.load(std::memory_order_relaxed); }

 private:
  // Counts one call on `calls` and, when the plan applies to it, waits its delay; returns the
  // fault this call gets (None: pass it through).
  IoFault next_call(std::atomic<std::int64_t>& calls, bool planned) noexcept;

  std::shared_ptr<IoBackend> inner_;
  FaultPlan plan_;
  std::atomic<std::int64_t> read_calls_{0};
  std::atomic<std::int64_t> write_calls_{0};
};

}  // namespace tt
