// POSIX file access for the I/O engine (reads, anonymous spill files), and the fault-injecting wrapper its tests use.
#include "tt/storage/io_backend.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "tt/common/error.h"

namespace tt {
namespace {

[[noreturn]] void refuse_spill_file(const std::string& directory, const std::string& call, int error) {
  const std::string message = "create a spill file in '" + directory + "' (" + call + "): " + std::strerror(error);
  throw Error(error == ENOENT ? ErrorCode::NotFound : ErrorCode::IO, message);
}

}  // namespace

int PosixIoBackend::open(const std::string& path, bool direct) {
  const int flags = O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0);
  for (;;) {
    const int fd = ::open(path.c_str(), flags);
    if (fd >= 0) return fd;
    const int error = errno;
    if (error == EINTR) continue;
    const std::string reason = std::strerror(error);
    if (error == ENOENT) throw Error(ErrorCode::NotFound, "open '" + path + "': " + reason);
    // open(2) documents EINVAL for O_DIRECT on a filesystem that does not support it.
    if (direct && error == EINVAL) {
      throw Error(ErrorCode::Incompatible, "open '" + path + "' with O_DIRECT: the filesystem refuses it (" +
                                               reason + ")");
    }
    throw Error(ErrorCode::IO, std::string("open '") + path + "'" + (direct ? " with O_DIRECT" : "") + ": " + reason);
  }
}

ssize_t PosixIoBackend::pread(int handle, void* destination, std::size_t length, std::uint64_t offset) noexcept {
  const ssize_t got = ::pread(handle, destination, length, static_cast<off_t>(offset));
  return got >= 0 ? got : -errno;
}

int PosixIoBackend::open_for_spill(const std::string& directory) {
  for (;;) {
    const int fd = ::open(directory.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
    const int error = errno;
    if (error == EINTR) continue;
    // open(2): EOPNOTSUPP where the filesystem lacks O_TMPFILE, EISDIR where the kernel does
    // (it then sees O_DIRECTORY alone); EINVAL as some filesystems' way of saying either.
    if (error == EOPNOTSUPP || error == EISDIR || error == EINVAL) return create_unlinked_spill_file(directory);
    refuse_spill_file(directory, "O_TMPFILE", error);
  }
}

int create_unlinked_spill_file(const std::string& directory) {
  std::string name = directory + "/tt-spill-XXXXXX";
  const int fd = ::mkostemp(name.data(), O_CLOEXEC);  // mode 0600
  if (fd < 0) refuse_spill_file(directory, "mkostemp", errno);
  if (::unlink(name.c_str()) != 0) {
    const int error = errno;
    ::close(fd);
    refuse_spill_file(directory, "unlink '" + name + "'", error);
  }
  return fd;
}

ssize_t PosixIoBackend::pwrite(int handle, const void* source, std::size_t length, std::uint64_t offset) noexcept {
  const ssize_t wrote = ::pwrite(handle, source, length, static_cast<off_t>(offset));
  return wrote >= 0 ? wrote : -errno;
}

int PosixIoBackend::truncate(int handle) noexcept {
  for (;;) {
    if (::ftruncate(handle, 0) == 0) return 0;
    if (errno != EINTR) return -errno;
  }
}

void PosixIoBackend::close(int handle) noexcept { ::close(handle); }

FileIdentity PosixIoBackend::identity(int handle) { return file_identity(handle); }

FaultInjectingIoBackend::FaultInjectingIoBackend(std::shared_ptr<IoBackend> inner, FaultPlan plan)
    : inner_(std::move(inner)), plan_(plan) {
  if (!inner_) throw Error(ErrorCode::InvalidArgument, "FaultInjectingIoBackend: the wrapped backend is null");
  if (plan_.at_call < 1) {
    throw Error(ErrorCode::InvalidArgument,
                "FaultInjectingIoBackend: at_call counts from 1, found " + std::to_string(plan_.at_call));
  }
  if (!std::isfinite(plan_.delay_s) || plan_.delay_s < 0) {
    throw Error(ErrorCode::InvalidArgument,
                "FaultInjectingIoBackend: delay_s must be finite and >= 0, found " + std::to_string(plan_.delay_s));
  }
}

IoFault FaultInjectingIoBackend::next_call(std::atomic<std::int64_t>& calls, bool planned) noexcept {
  const std::int64_t call = calls.fetch_add(1, std::memory_order_relaxed) + 1;
  if (!planned) return IoFault::None;
  if (plan_.delay_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(plan_.delay_s));
  const bool faulty = call == plan_.at_call || (plan_.repeat && call > plan_.at_call);
  return faulty ? plan_.fault : IoFault::None;
}

ssize_t FaultInjectingIoBackend::pread(int handle, void* destination, std::size_t length,
                                       std::uint64_t offset) noexcept {
  switch (next_call(read_calls_, plan_.reads)) {
    case IoFault::Eio: return -EIO;
    case IoFault::Enospc: return -ENOSPC;
    case IoFault::Short: return inner_->pread(handle, destination, length > 1 ? length / 2 : length, offset);
    case IoFault::None: break;
  }
  return inner_->pread(handle, destination, length, offset);
}

ssize_t FaultInjectingIoBackend::pwrite(int handle, const void* source, std::size_t length,
                                        std::uint64_t offset) noexcept {
  switch (next_call(write_calls_, plan_.writes)) {
    case IoFault::Eio: return -EIO;
    case IoFault::Enospc: return -ENOSPC;
    case IoFault::Short: return inner_->pwrite(handle, source, length > 1 ? length / 2 : length, offset);
    case IoFault::None: break;
  }
  return inner_->pwrite(handle, source, length, offset);
}

}  // namespace tt
