// Free space of a filesystem and the sequential read bandwidth of the device under it.
#pragma once

#include <cstdint>
#include <string>

namespace tt {

// Space of the filesystem holding a path, in bytes.
struct DiskSpace {
  std::int64_t free_bytes = 0;   // available to an unprivileged process (excludes root's reserve)
  std::int64_t total_bytes = 0;  // size of the filesystem
  bool in_memory = false;        // tmpfs or ramfs: its bytes are RAM (statfs's f_type)
};

// Result of one read-bandwidth measurement.
struct ReadBandwidth {
  double bytes_per_second = 0;  // bytes read / wall time of the read loop
  bool direct = false;          // true: O_DIRECT reads; false: page-cache reads after dropping the file's cached pages
  std::int64_t bytes = 0;       // bytes read: the request rounded up to 1 MiB
};

// statvfs and statfs of `path`. Throws Error(IO) naming the path and the OS reason on failure.
DiskSpace probe_disk(const std::string& path);

// Writes a temporary file of `bytes` (rounded up to 1 MiB, pseudo-random content so that
// compressing or deduplicating storage cannot shortcut it) in `directory`, fsyncs it, reads
// it back sequentially in 4 MiB O_DIRECT reads and removes it, also on failure. Where
// O_DIRECT is refused (EINVAL, e.g. tmpfs) it reads through the page cache after evicting
// the file's pages, and says so in `direct`. Throws Error(InvalidArgument) for bytes <= 0,
// Error(ResourceExhausted) when the filesystem has less free space than the file needs,
// Error(IO) naming the directory or file and the OS reason for any system call failure.
ReadBandwidth measure_read_bandwidth(const std::string& directory, std::int64_t bytes);

}  // namespace tt
