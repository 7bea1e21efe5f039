// Parsing meminfo files: the host's /proc/meminfo and the per-node files of sysfs.
#include "tt/host/memory_info.h"

#include <limits>
#include <optional>

#include "tt/common/error.h"
#include "tt/host/text_file.h"

namespace tt {

std::map<std::string, std::int64_t, std::less<>> parse_meminfo(std::string_view text,
                                                               const std::string& file) {
  std::map<std::string, std::int64_t, std::less<>> fields;
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = trim(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view name = trim(line.substr(0, colon));
    // Per-node files prefix every field with "Node N ": the name is the last word.
    if (const std::size_t space = name.rfind(' '); space != std::string_view::npos) {
      name.remove_prefix(space + 1);
    }
    std::string_view value = trim(line.substr(colon + 1));
    std::int64_t scale = 1;
    if (value.size() >= 2 && value.substr(value.size() - 2) == "kB") {
      value = trim(value.substr(0, value.size() - 2));
      scale = 1024;
    }
    const std::int64_t number = parse_int64(value, file + "' line '" + std::string(line));
    if (number < 0 || number > std::numeric_limits<std::int64_t>::max() / scale) {
      throw Error(ErrorCode::InvalidArgument,
                  "'" + file + "': expected a byte count, found '" + std::string(line) + "'");
    }
    fields.emplace(std::string(name), number * scale);
  }
  return fields;
}

std::string parse_selected_mode(std::string_view text) {
  const std::size_t open = text.find('[');
  const std::size_t close = text.find(']', open);
  if (open == std::string_view::npos || close == std::string_view::npos) return "";
  return std::string(text.substr(open + 1, close - open - 1));
}

MemoryInfo probe_memory(const ProbeRoots& roots) {
  const std::string file = join_path(roots.proc, "meminfo");
  const auto fields = parse_meminfo(read_text_file(file), file);
  const auto field = [&](std::string_view name) -> std::optional<std::int64_t> {
    const auto found = fields.find(name);
    if (found == fields.end()) return std::nullopt;
    return found->second;
  };
  const auto missing = [&](std::string_view what) {
    return Error(ErrorCode::InvalidArgument, "'" + file + "': expected " + std::string(what) + ", found none");
  };

  MemoryInfo info;
  const std::string huge_pages = join_path(roots.sys, "kernel/mm/transparent_hugepage/enabled");
  info.transparent_huge_pages = parse_selected_mode(read_text_file_if_exists(huge_pages).value_or(""));
  const std::optional<std::int64_t> total = field("MemTotal");
  if (!total) throw missing("a MemTotal line");
  info.total_bytes = *total;
  if (const std::optional<std::int64_t> available = field("MemAvailable")) {
    info.available_bytes = *available;
    return info;
  }
  // Kernels before 3.14 lack MemAvailable; free plus reclaimable caches is the usual estimate.
  const std::optional<std::int64_t> free = field("MemFree");
  if (!free) throw missing("MemAvailable or MemFree");
  info.available_bytes = *free + field("Buffers").value_or(0) + field("Cached").value_or(0);
  info.available_estimated = true;
  return info;
}

}  // namespace tt
