// Reading a safetensors header from a file: exactly its 8 + N bytes, with pread, before parsing them.
#include "tt/storage/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "tt/common/error.h"
#include "tt/common/os_resources.h"

namespace tt {
namespace {

// Reads exactly out.size() bytes at `offset`; a file shrinking under us reads short, which is corruption.
void pread_exactly(int fd, const std::string& path, std::span<std::uint8_t> out, std::uint64_t offset,
                   std::uint64_t file_size) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t got = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_os_error("read", path, errno);
    }
    if (got == 0) {
      throw Error(ErrorCode::DataCorruption, path + ": the file ended at byte " + std::to_string(offset + done) +
                                                 " while reading its header (it held " + std::to_string(file_size) +
                                                 " bytes when opened)");
    }
    done += static_cast<std::size_t>(got);
  }
}

}  // namespace

SafetensorsHeader read_safetensors_header(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int error = errno;
    throw_os_error("open", path, error, error == ENOENT || error == ENOTDIR ? ErrorCode::NotFound : ErrorCode::IO);
  }
  struct stat status {};
  if (::fstat(fd.get(), &status) != 0) throw_os_error("stat", path, errno);
  if (!S_ISREG(status.st_mode)) throw Error(ErrorCode::IO, "read '" + path + "': not a regular file");
  const auto file_size = static_cast<std::uint64_t>(status.st_size);
  std::uint8_t length_bytes[8] = {};
  // A file under 8 bytes is read as empty, so it reports corruption rather than a short read.
  const std::size_t length_read = file_size >= 8 ? 8 : 0;
  pread_exactly(fd.get(), path, std::span<std::uint8_t>(length_bytes, length_read), 0, file_size);
  const std::uint64_t n =
      safetensors_header_length(path, std::span<const std::uint8_t>(length_bytes, length_read), file_size);
  // Sized from N only after it was checked against the cap and the file size.
  std::vector<std::uint8_t> prefix(8 + n);
  std::copy(length_bytes, length_bytes + 8, prefix.begin());
  pread_exactly(fd.get(), path, std::span<std::uint8_t>(prefix).subspan(8), 8, file_size);
  return parse_safetensors_header(path, prefix, file_size);
}

}  // namespace tt
