// Reading and parsing the small text files of procfs, sysfs and cgroupfs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tt {

// Whole contents of `path`, or nullopt when it does not exist (ENOENT or ENOTDIR).
// Reads until end of file, since procfs reports size 0. Throws Error(IO) naming the path
// for any other failure (permission, a directory, a read error).
std::optional<std::string> read_text_file_if_exists(const std::string& path);

// Whole contents of `path`. Throws Error(IO) naming the path when it cannot be read,
// including when it does not exist.
std::string read_text_file(const std::string& path);

// True when `path` names an existing directory; never throws.
bool is_directory(const std::string& path);

// `text` without leading and trailing whitespace (spaces, tabs, newlines).
std::string_view trim(std::string_view text);

// The decimal integer `text`, surrounding whitespace allowed. Throws
// Error(InvalidArgument) naming `file` and quoting the text when it is not one.
std::int64_t parse_int64(std::string_view text, const std::string& file);

// `directory` joined with `relative`, where `relative` may start with '/' (as cgroup
// paths do) and may be "/" or empty, which yield `directory` itself.
std::string join_path(const std::string& directory, std::string_view relative);

}  // namespace tt
