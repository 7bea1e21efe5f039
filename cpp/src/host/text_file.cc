// Reading whole pseudo-files with POSIX calls, so failures carry errno, and strict number parsing.
#include "tt/host/text_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>

#include "tt/common/error.h"
#include "tt/common/os_resources.h"

namespace tt {

std::optional<std::string> read_text_file_if_exists(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR) return std::nullopt;
    throw_os_error("open", path, error);
  }
  std::string contents;
  char buffer[4096];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_os_error("read", path, errno);
    }
    contents.append(buffer, static_cast<std::size_t>(got));
  }
  return contents;
}

std::string read_text_file(const std::string& path) {
  std::optional<std::string> contents = read_text_file_if_exists(path);
  if (!contents) throw_os_error("read", path, ENOENT);
  return *std::move(contents);
}

bool is_directory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

std::string_view trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\n";
  const std::size_t first = text.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  const std::size_t last = text.find_last_not_of(kSpace);
  return text.substr(first, last - first + 1);
}

std::int64_t parse_int64(std::string_view text, const std::string& file) {
  const std::string_view digits = trim(text);
  std::int64_t value = 0;
  const char* end = digits.data() + digits.size();
  const auto [stop, error] = std::from_chars(digits.data(), end, value);
  if (digits.empty() || error != std::errc() || stop != end) {
    throw Error(ErrorCode::InvalidArgument,
                "'" + file + "': expected a decimal integer, found '" + std::string(digits) + "'");
  }
  return value;
}

std::string join_path(const std::string& directory, std::string_view relative) {
  while (!relative.empty() && relative.front() == '/') relative.remove_prefix(1);
  while (!relative.empty() && relative.back() == '/') relative.remove_suffix(1);
  if (relative.empty()) return directory;
  if (!directory.empty() && directory.back() == '/') return directory + std::string(relative);
  return directory + "/" + std::string(relative);
}

}  // namespace tt
