// Control-group limits: locating the process's cgroup (v1 or v2) and reading its limit files.
#include "tt/host/cgroup.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "tt/common/error.h"
#include "tt/host/text_file.h"

namespace tt {
namespace {

// v1 reports "no limit" as LONG_MAX rounded down to a page (9223372036854771712); any
// value this large is beyond every real machine, so it is treated as unlimited.
constexpr std::int64_t kV1UnlimitedBytes = std::int64_t{1} << 62;

// One line of /proc/self/cgroup: "ID:CONTROLLER,CONTROLLER:PATH".
struct CgroupLine {
  std::string hierarchy;
  std::vector<std::string> controllers;  // empty for the v2 line "0::/path"
  std::string path;
};

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(separator, start), text.size());
    if (end > start) parts.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::vector<CgroupLine> parse_proc_cgroup(std::string_view text, const std::string& file) {
  std::vector<CgroupLine> lines;
  for (const std::string& raw : split(text, '\n')) {
    const std::string_view line = trim(raw);
    if (line.empty()) continue;
    const std::size_t first = line.find(':');
    const std::size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) {
      throw Error(ErrorCode::InvalidArgument, "'" + file + "': expected 'ID:CONTROLLERS:PATH', found '" +
                                                  std::string(line) + "'");
    }
    lines.push_back({std::string(line.substr(0, first)),
                     split(line.substr(first + 1, second - first - 1), ','),
                     std::string(line.substr(second + 1))});
  }
  return lines;
}

template <typename T>
std::optional<T> tighter(std::optional<T> a, std::optional<T> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

// The process's cgroup directory under hierarchy `root` followed by its ancestors up to
// `root`. Just `root` when the own directory is absent (namespace root mounted) or the path
// climbs out of the namespace ("/../.."), where the ancestors are not visible anyway.
std::vector<std::string> own_and_ancestors(const std::string& root, std::string_view cgroup_path) {
  const std::vector<std::string> parts = split(cgroup_path, '/');
  const bool escapes = std::any_of(parts.begin(), parts.end(),
                                   [](const std::string& part) { return part == ".." || part == "."; });
  std::vector<std::string> directories;
  for (std::size_t depth = parts.size(); depth > 0; --depth) {
    std::string directory = root;
    for (std::size_t i = 0; i < depth; ++i) directory = join_path(directory, parts[i]);
    directories.push_back(std::move(directory));
  }
  if (escapes || directories.empty() || !is_directory(directories.front())) directories.clear();
  directories.push_back(root);
  return directories;
}

// A non-negative count (usage) or nullopt when the file is missing.
std::optional<std::int64_t> read_count(const std::string& file) {
  const std::optional<std::string> text = read_text_file_if_exists(file);
  if (!text) return std::nullopt;
  const std::int64_t value = parse_int64(*text, file);
  if (value < 0) {
    throw Error(ErrorCode::InvalidArgument,
                "'" + file + "': expected a non-negative byte count, found '" + std::string(trim(*text)) + "'");
  }
  return value;
}

// One field of a memory.stat file ("KEY VALUE" per line), nullopt when the file or the key
// is missing.
std::optional<std::int64_t> read_stat_field(const std::string& file, std::string_view key) {
  const std::optional<std::string> text = read_text_file_if_exists(file);
  if (!text) return std::nullopt;
  for (const std::string& line : split(*text, '\n')) {
    const std::vector<std::string> fields = split(trim(line), ' ');
    if (fields.size() != 2 || fields[0] != key) continue;
    const std::int64_t value = parse_int64(fields[1], file);
    if (value < 0) {
      throw Error(ErrorCode::InvalidArgument, "'" + file + "': expected a non-negative " + std::string(key) +
                                                  ", found '" + fields[1] + "'");
    }
    return value;
  }
  return std::nullopt;
}

// v2 memory.max / memory.high: "max" or a byte count.
std::optional<std::int64_t> read_v2_memory_limit(const std::string& file) {
  const std::optional<std::string> text = read_text_file_if_exists(file);
  if (!text || trim(*text) == "max") return std::nullopt;
  return read_count(file);
}

std::optional<double> cores(std::int64_t quota, std::int64_t period, const std::string& file,
                            std::string_view text) {
  if (quota <= 0 || period <= 0) {
    throw Error(ErrorCode::InvalidArgument, "'" + file + "': expected a positive quota and period, found '" +
                                                std::string(trim(text)) + "'");
  }
  return static_cast<double>(quota) / static_cast<double>(period);
}

// v2 cpu.max: "QUOTA PERIOD" or "max PERIOD" (older kernels may omit the period after max).
std::optional<double> read_v2_cpu_max(const std::string& file) {
  const std::optional<std::string> text = read_text_file_if_exists(file);
  if (!text) return std::nullopt;
  const std::vector<std::string> fields = split(trim(*text), ' ');
  if (fields.size() == 1 && fields[0] == "max") return std::nullopt;
  if (fields.size() != 2) {
    throw Error(ErrorCode::InvalidArgument, "'" + file + "': expected 'QUOTA PERIOD' or 'max PERIOD', found '" +
                                                std::string(trim(*text)) + "'");
  }
  if (fields[0] == "max") return std::nullopt;
  return cores(parse_int64(fields[0], file), parse_int64(fields[1], file), file, *text);
}

// v1 memory.limit_in_bytes: a byte count where huge values mean unlimited.
std::optional<std::int64_t> read_v1_memory_limit(const std::string& file) {
  const std::optional<std::string> text = read_text_file_if_exists(file);
  if (!text) return std::nullopt;
  const std::int64_t value = parse_int64(*text, file);
  if (value == -1 || value >= kV1UnlimitedBytes) return std::nullopt;
  if (value < 0) {
    throw Error(ErrorCode::InvalidArgument,
                "'" + file + "': expected a byte count or -1, found '" + std::string(trim(*text)) + "'");
  }
  return value;
}

// v1 cpu.cfs_quota_us (-1: unlimited) over cpu.cfs_period_us, both in `directory`.
std::optional<double> read_v1_cpu_quota(const std::string& directory) {
  const std::string quota_file = join_path(directory, "cpu.cfs_quota_us");
  const std::optional<std::string> quota_text = read_text_file_if_exists(quota_file);
  if (!quota_text) return std::nullopt;
  const std::int64_t quota = parse_int64(*quota_text, quota_file);
  if (quota == -1) return std::nullopt;
  const std::string period_file = join_path(directory, "cpu.cfs_period_us");
  const std::optional<std::string> period_text = read_text_file_if_exists(period_file);
  if (!period_text) return std::nullopt;  // a quota without a period cannot be converted to cores
  return cores(quota, parse_int64(*period_text, period_file), quota_file + "' / '" + period_file,
               std::string(trim(*quota_text)) + " / " + std::string(trim(*period_text)));
}

CgroupLimits probe_v2(const std::string& root, std::string_view cgroup_path) {
  CgroupLimits limits;
  limits.version = 2;
  const std::vector<std::string> directories = own_and_ancestors(root, cgroup_path);
  limits.memory_path = limits.cpu_path = directories.front();
  for (const std::string& directory : directories) {
    limits.memory_max_bytes =
        tighter(limits.memory_max_bytes, read_v2_memory_limit(join_path(directory, "memory.max")));
    limits.memory_high_bytes =
        tighter(limits.memory_high_bytes, read_v2_memory_limit(join_path(directory, "memory.high")));
    limits.cpu_quota_cores = tighter(limits.cpu_quota_cores, read_v2_cpu_max(join_path(directory, "cpu.max")));
  }
  limits.memory_current_bytes = read_count(join_path(directories.front(), "memory.current"));
  limits.memory_inactive_file_bytes = read_stat_field(join_path(directories.front(), "memory.stat"), "inactive_file");
  return limits;
}

bool has_controller(const CgroupLine& line, std::string_view controller) {
  return std::find(line.controllers.begin(), line.controllers.end(), controller) != line.controllers.end();
}

// Where a v1 controller's hierarchy is mounted: "<root>/memory", or for cpu one of the
// names distributions give the combined cpu and cpuacct hierarchy.
std::optional<std::string> v1_mount(const std::string& root, const CgroupLine& line,
                                    const std::string& controller) {
  std::string listed;
  for (const std::string& name : line.controllers) listed += (listed.empty() ? "" : ",") + name;
  std::vector<std::string> candidates = {controller, listed};
  if (controller == "cpu") candidates.insert(candidates.end(), {"cpu,cpuacct", "cpuacct,cpu"});
  for (const std::string& candidate : candidates) {
    if (is_directory(join_path(root, candidate))) return join_path(root, candidate);
  }
  return std::nullopt;
}

void read_v1_memory(const std::string& mount, std::string_view cgroup_path, CgroupLimits& limits) {
  const std::vector<std::string> directories = own_and_ancestors(mount, cgroup_path);
  limits.memory_path = directories.front();
  for (const std::string& directory : directories) {
    limits.memory_max_bytes =
        tighter(limits.memory_max_bytes, read_v1_memory_limit(join_path(directory, "memory.limit_in_bytes")));
  }
  limits.memory_current_bytes = read_count(join_path(directories.front(), "memory.usage_in_bytes"));
  // usage_in_bytes counts the cgroup's descendants too: so do the "total_" fields.
  limits.memory_inactive_file_bytes =
      read_stat_field(join_path(directories.front(), "memory.stat"), "total_inactive_file");
}

void read_v1_cpu(const std::string& mount, std::string_view cgroup_path, CgroupLimits& limits) {
  const std::vector<std::string> directories = own_and_ancestors(mount, cgroup_path);
  limits.cpu_path = directories.front();
  for (const std::string& directory : directories) {
    limits.cpu_quota_cores = tighter(limits.cpu_quota_cores, read_v1_cpu_quota(directory));
  }
}

CgroupLimits probe_v1(const std::string& root, const std::vector<CgroupLine>& lines) {
  CgroupLimits limits;
  for (const CgroupLine& line : lines) {
    if (has_controller(line, "memory") && limits.memory_path.empty()) {
      if (const auto mount = v1_mount(root, line, "memory")) read_v1_memory(*mount, line.path, limits);
    }
    if (has_controller(line, "cpu") && limits.cpu_path.empty()) {
      if (const auto mount = v1_mount(root, line, "cpu")) read_v1_cpu(*mount, line.path, limits);
    }
  }
  limits.version = limits.memory_path.empty() && limits.cpu_path.empty() ? 0 : 1;
  return limits;
}

}  // namespace

CgroupLimits probe_cgroup(const ProbeRoots& roots) {
  const std::string file = join_path(roots.proc, "self/cgroup");
  const std::optional<std::string> text = read_text_file_if_exists(file);
  if (!text) return {};
  const std::vector<CgroupLine> lines = parse_proc_cgroup(*text, file);
  // A hybrid host lists "0::/" too but mounts cgroup2 elsewhere; only a v2 root at
  // <cgroup> (which has cgroup.controllers) makes this a v2 host.
  const bool v2_root = read_text_file_if_exists(join_path(roots.cgroup, "cgroup.controllers")).has_value();
  for (const CgroupLine& line : lines) {
    if (v2_root && line.hierarchy == "0" && line.controllers.empty()) return probe_v2(roots.cgroup, line.path);
  }
  return probe_v1(roots.cgroup, lines);
}

}  // namespace tt
