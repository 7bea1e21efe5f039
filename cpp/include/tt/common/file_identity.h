// What identifies a file's bytes without reading them: stat(2)'s device, inode, size and times.
#pragma once

#include <cstdint>
#include <string>

namespace tt {

// A write through any path or mapping moves a file's times before it changes a byte
// (`changed_ns` is set by the kernel alone: utimensat cannot put it back), and replacing
// the file changes the inode: equal identities mean the bytes it had when the first was taken.
struct FileIdentity {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::uint64_t size = 0;
  std::int64_t modified_ns = 0;
  std::int64_t changed_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

// File times may be as coarse as a second (ext4's small inodes, network filesystems; FAT keeps
// two): a write within one granule of a file's last change can leave its times as they were.
// An identity vouches for the bytes only once its last change is this old.
inline constexpr std::int64_t kSettledNanoseconds = 3'000'000'000;

// Whether `identity`'s last change (ctime) is at least `settle_ns` before now, on the realtime
// clock that file times follow.
bool settled(const FileIdentity& identity, std::int64_t settle_ns = kSettledNanoseconds);

// The identity of the file at `path` (stat(2), following links). Throws Error(NotFound) when
// it does not exist, Error(IO) naming it and the OS reason otherwise.
FileIdentity file_identity(const std::string& path);

// The identity of an open file descriptor (fstat(2)). Throws Error(IO) with the OS reason.
FileIdentity file_identity(int descriptor);

}  // namespace tt
