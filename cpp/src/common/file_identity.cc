#include "tt/common/file_identity.h"

#include <sys/stat.h>

#include <cerrno>
#include <ctime>
#include <cstring>

#include "tt/common/error.h"

namespace tt {
namespace {

FileIdentity identity_of(const struct stat& info) {
  return {static_cast<std::uint64_t>(info.st_dev), static_cast<std::uint64_t>(info.st_ino),
          static_cast<std::uint64_t>(info.st_size),
          std::int64_t{info.st_mtim.tv_sec} * 1'000'000'000 + info.st_mtim.tv_nsec,
          std::int64_t{info.st_ctim.tv_sec} * 1'000'000'000 + info.st_ctim.tv_nsec};
}

}  // namespace

bool settled(const FileIdentity& identity, std::int64_t settle_ns) {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return std::int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec - identity.changed_ns >= settle_ns;
}

FileIdentity file_identity(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    const int error = errno;
    throw_os_error("stat", path, error, error == ENOENT ? ErrorCode::NotFound : ErrorCode::IO);
  }
  return identity_of(info);
}

FileIdentity file_identity(int descriptor) {
  struct stat info {};
  if (::fstat(descriptor, &info) != 0) {
    throw Error(ErrorCode::IO, "fstat of descriptor " + std::to_string(descriptor) + ": " + std::strerror(errno));
  }
  return identity_of(info);
}

}  // namespace tt
