// NUMA topology from sysfs: one directory per node with its meminfo and cpulist.
#include "tt/host/numa.h"

#include <algorithm>
#include <charconv>
#include <filesystem>

#include "tt/common/error.h"
#include "tt/host/memory_info.h"
#include "tt/host/text_file.h"

namespace tt {
namespace {

// The non-negative integer that is all of `text`, or nullopt.
std::optional<int> whole_number(std::string_view text) {
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end || value < 0) return std::nullopt;
  return value;
}

std::int64_t node_field(const std::map<std::string, std::int64_t, std::less<>>& fields,
                        std::string_view name, const std::string& file) {
  const auto found = fields.find(name);
  if (found == fields.end()) {
    throw Error(ErrorCode::InvalidArgument,
                "'" + file + "': expected a '" + std::string(name) + "' line, found none");
  }
  return found->second;
}

}  // namespace

std::vector<int> parse_cpu_list(std::string_view text, const std::string& file) {
  const std::string_view list = trim(text);
  const auto malformed = [&] {
    return Error(ErrorCode::InvalidArgument,
                 "'" + file + "': expected a CPU list such as '0-3,8-11', found '" + std::string(list) + "'");
  };
  std::vector<int> cpus;
  std::string_view rest = list;
  while (!rest.empty()) {
    const std::size_t comma = std::min(rest.find(','), rest.size());
    const std::string_view item = trim(rest.substr(0, comma));
    rest.remove_prefix(std::min(comma + 1, rest.size()));
    const std::size_t dash = item.find('-');
    const std::optional<int> first = whole_number(item.substr(0, dash));
    const std::optional<int> last =
        dash == std::string_view::npos ? first : whole_number(item.substr(dash + 1));
    if (!first || !last || *last < *first) throw malformed();
    for (int cpu = *first; cpu <= *last; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::vector<NumaNode> probe_numa(const ProbeRoots& roots) {
  namespace fs = std::filesystem;
  const std::string nodes_directory = join_path(roots.sys, "devices/system/node");
  std::vector<NumaNode> nodes;
  if (!is_directory(nodes_directory)) return nodes;
  std::error_code error;
  for (fs::directory_iterator entry(nodes_directory, error), end; !error && entry != end;
       entry.increment(error)) {
    const std::string name = entry->path().filename().string();
    if (name.rfind("node", 0) != 0) continue;
    const std::optional<int> id = whole_number(std::string_view(name).substr(4));
    if (!id) continue;  // "node" prefixes other entries too, none of them numbered
    NumaNode node;
    node.id = *id;
    const std::string directory = entry->path().string();
    const std::string meminfo_file = join_path(directory, "meminfo");
    const auto fields = parse_meminfo(read_text_file(meminfo_file), meminfo_file);
    node.mem_total_bytes = node_field(fields, "MemTotal", meminfo_file);
    node.mem_free_bytes = node_field(fields, "MemFree", meminfo_file);
    const std::string cpulist_file = join_path(directory, "cpulist");
    node.cpus = parse_cpu_list(read_text_file(cpulist_file), cpulist_file);
    nodes.push_back(std::move(node));
  }
  if (error) throw Error(ErrorCode::IO, "list '" + nodes_directory + "': " + error.message());
  std::sort(nodes.begin(), nodes.end(), [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  return nodes;
}

}  // namespace tt
