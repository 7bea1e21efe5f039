// Filesystem space and kind (statvfs, statfs) and sequential read bandwidth measured with a temporary file.
#include "tt/host/disk.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <vector>

#include "tt/common/aligned_buffer.h"
#include "tt/common/error.h"
#include "tt/common/os_resources.h"
#include "tt/host/text_file.h"

namespace tt {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;
constexpr std::size_t kChunkBytes = 4 << 20;  // large enough to reach a device's streaming rate
constexpr std::size_t kAlignment = 4096;      // satisfies O_DIRECT on every common block size

// The temporary file, unlinked when the measurement ends, whether it succeeded or threw.
class TemporaryFile {
 public:
  explicit TemporaryFile(const std::string& directory) : path_(join_path(directory, "tt_read_probe_XXXXXX")) {
    const int fd = ::mkstemp(path_.data());
    if (fd < 0) throw_os_error("create a temporary file in", directory, errno);
    ::close(fd);
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  ~TemporaryFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Pseudo-random words (xorshift64), so neither compression nor deduplication shrinks the file.
void fill_pseudo_random(std::uint64_t* words, std::size_t count, std::uint64_t& state) {
  for (std::size_t i = 0; i < count; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    words[i] = state;
  }
}

void write_file(const std::string& path, std::int64_t bytes, char* buffer) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC));
  if (fd.get() < 0) throw_os_error("open for writing", path, errno);
  std::uint64_t state = 0x9E3779B97F4A7C15ULL;
  for (std::int64_t written = 0; written < bytes;) {
    const std::size_t chunk = static_cast<std::size_t>(std::min<std::int64_t>(kChunkBytes, bytes - written));
    fill_pseudo_random(reinterpret_cast<std::uint64_t*>(buffer), chunk / sizeof(std::uint64_t), state);
    for (std::size_t done = 0; done < chunk;) {
      const ssize_t got = ::write(fd.get(), buffer + done, chunk - done);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw_os_error("write", path, errno);
      done += static_cast<std::size_t>(got);
    }
    written += static_cast<std::int64_t>(chunk);
  }
  if (::fsync(fd.get()) != 0) throw_os_error("fsync", path, errno);
}

// Reads `path` to its end; returns the byte count, or -1 when the first read is refused
// with EINVAL (a filesystem that accepts O_DIRECT at open but not for reads).
std::int64_t read_all(int fd, const std::string& path, char* buffer) {
  std::int64_t total = 0;
  for (;;) {
    const ssize_t got = ::read(fd, buffer, kChunkBytes);
    if (got == 0) return total;
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EINVAL && total == 0) return -1;
    if (got < 0) throw_os_error("read", path, errno);
    total += got;
  }
}

}  // namespace

DiskSpace probe_disk(const std::string& path) {
  struct statvfs info {};
  if (::statvfs(path.c_str(), &info) != 0) throw_os_error("statvfs", path, errno);
  DiskSpace space;
  // f_bavail, not f_bfree: the root-reserved blocks are not available to this process.
  space.free_bytes = static_cast<std::int64_t>(info.f_bavail) * static_cast<std::int64_t>(info.f_frsize);
  space.total_bytes = static_cast<std::int64_t>(info.f_blocks) * static_cast<std::int64_t>(info.f_frsize);
  struct statfs kind {};
  if (::statfs(path.c_str(), &kind) != 0) throw_os_error("statfs", path, errno);
  space.in_memory = kind.f_type == TMPFS_MAGIC || kind.f_type == RAMFS_MAGIC;
  return space;
}

ReadBandwidth measure_read_bandwidth(const std::string& directory, std::int64_t bytes) {
  if (bytes <= 0 || bytes > std::numeric_limits<std::int64_t>::max() - kMiB) {
    throw Error(ErrorCode::InvalidArgument, "measure_read_bandwidth in '" + directory +
                                                "': expected a positive byte count, found " + std::to_string(bytes));
  }
  ReadBandwidth result;
  result.bytes = (bytes + kMiB - 1) / kMiB * kMiB;
  const DiskSpace space = probe_disk(directory);
  if (space.free_bytes < result.bytes) {
    throw Error(ErrorCode::ResourceExhausted, "measure_read_bandwidth in '" + directory + "': needs " +
                                                  std::to_string(result.bytes) + " bytes free, found " +
                                                  std::to_string(space.free_bytes));
  }
  const AlignedBuffer owned(kChunkBytes, kAlignment);
  char* buffer = owned.data();

  TemporaryFile file(directory);
  write_file(file.path(), result.bytes, buffer);

  result.direct = true;
  UniqueFd fd(::open(file.path().c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
  if (fd.get() < 0 && errno != EINVAL) throw_os_error("open with O_DIRECT", file.path(), errno);
  const auto start_buffered = [&] {
    // The file was fsynced, so its cached pages are clean and DONTNEED drops them:
    // the reads below then come from the device, as O_DIRECT ones would.
    result.direct = false;
    fd.reset(::open(file.path().c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) throw_os_error("open", file.path(), errno);
    if (const int error = ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED); error != 0) {
      throw_os_error("posix_fadvise DONTNEED", file.path(), error);
    }
  };
  if (fd.get() < 0) start_buffered();

  auto start = std::chrono::steady_clock::now();
  std::int64_t read = read_all(fd.get(), file.path(), buffer);
  if (read < 0) {
    start_buffered();
    start = std::chrono::steady_clock::now();
    read = read_all(fd.get(), file.path(), buffer);
    if (read < 0) throw_os_error("read", file.path(), EINVAL);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (read != result.bytes) {
    throw Error(ErrorCode::IO, "read '" + file.path() + "': expected " + std::to_string(result.bytes) +
                                   " bytes, found " + std::to_string(read));
  }
  result.bytes_per_second = static_cast<double>(read) / std::max(seconds, 1e-9);
  return result;
}

}  // namespace tt
