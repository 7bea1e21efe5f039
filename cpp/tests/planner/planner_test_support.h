// Builders shared by the planner tests: hand-made problems and seeded random instances.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tt/planner/placement_problem.h"

namespace tt::test {

inline constexpr double kCannotRun = std::numeric_limits<double>::infinity();

inline PlacementRegion region(std::int64_t id, std::vector<std::int64_t> deps, std::vector<double> compute_s,
                              std::int64_t param_bytes = 0, std::int64_t output_bytes = 0) {
  return PlacementRegion{id, std::move(deps), std::move(compute_s), param_bytes, output_bytes};
}

// Devices "d0", "d1", ... with the given capacities, free transfers and free streaming;
// tests overwrite the costs they are about.
inline PlacementProblem problem_with_devices(std::vector<std::int64_t> capacities) {
  PlacementProblem problem;
  const std::size_t count = capacities.size();
  for (std::size_t d = 0; d < count; ++d) {
    std::string name = "d";  // appended, not "d" + ...: GCC 12 -O3 warns falsely (-Wrestrict) on the latter
    name += std::to_string(d);
    problem.devices.push_back({std::move(name), capacities[d]});
  }
  problem.transfer_s_per_byte.assign(count, std::vector<double>(count, 0.0));
  problem.stream_s_per_byte.assign(count, 0.0);
  return problem;
}

// A random instance: each region reads zero to two earlier ones, runs on each device with
// probability 0.8 (on at least one), and the capacities cover from none to all parameters.
inline PlacementProblem random_problem(std::size_t regions, std::size_t devices, unsigned seed) {
  std::mt19937 random(seed);
  auto uniform = [&random](double low, double high) {
    return std::uniform_real_distribution<double>(low, high)(random);
  };
  auto integer = [&random](std::int64_t low, std::int64_t high) {
    return std::uniform_int_distribution<std::int64_t>(low, high)(random);
  };

  PlacementProblem problem = problem_with_devices(std::vector<std::int64_t>(devices, 0));
  std::int64_t total_params = 0;
  for (std::size_t r = 0; r < regions; ++r) {
    PlacementRegion next;
    next.id = static_cast<std::int64_t>(r) * 10 + 7;  // ids are not positions
    const std::int64_t dep_count = integer(0, std::min<std::int64_t>(2, static_cast<std::int64_t>(r)));
    for (std::int64_t k = 0; k < dep_count; ++k) {
      const auto position = static_cast<std::size_t>(integer(0, static_cast<std::int64_t>(r) - 1));
      const std::int64_t dep = problem.regions[position].id;
      if (std::find(next.deps.begin(), next.deps.end(), dep) == next.deps.end()) next.deps.push_back(dep);
    }
    for (std::size_t d = 0; d < devices; ++d) {
      next.compute_s.push_back(uniform(0, 1) < 0.8 ? uniform(0.1, 10.0) : kCannotRun);
    }
    if (std::all_of(next.compute_s.begin(), next.compute_s.end(), [](double s) { return s == kCannotRun; })) {
      next.compute_s[static_cast<std::size_t>(integer(0, static_cast<std::int64_t>(devices) - 1))] = uniform(0.1, 10.0);
    }
    next.param_bytes = integer(0, 1000);
    next.output_bytes = integer(0, 1000);
    total_params += next.param_bytes;
    problem.regions.push_back(std::move(next));
  }
  for (std::size_t d = 0; d < devices; ++d) {
    problem.devices[d].capacity_bytes = integer(0, total_params);
    problem.stream_s_per_byte[d] = uniform(0.0, 0.01);
    for (std::size_t to = 0; to < devices; ++to) {
      if (to != d) problem.transfer_s_per_byte[d][to] = uniform(0.0, 0.005);
    }
  }
  return problem;
}

// A model-like instance: a chain where some regions also read one of the last twenty,
// devices of different speeds and memory, and parameters that do not all fit anywhere.
inline PlacementProblem chain_problem(std::size_t regions, std::size_t devices, unsigned seed) {
  std::mt19937 random(seed);
  auto uniform = [&random](double low, double high) {
    return std::uniform_real_distribution<double>(low, high)(random);
  };
  PlacementProblem problem = problem_with_devices(std::vector<std::int64_t>(devices, 0));
  std::int64_t total_params = 0;
  for (std::size_t r = 0; r < regions; ++r) {
    PlacementRegion next;
    next.id = static_cast<std::int64_t>(r);
    if (r > 0) next.deps.push_back(next.id - 1);
    if (r >= 2 && uniform(0, 1) < 0.15) {
      const auto back = static_cast<std::int64_t>(2 + uniform(0, std::min<double>(19.0, static_cast<double>(r) - 2)));
      next.deps.push_back(next.id - back);
    }
    const double work = uniform(0.5, 2.0) * 1e-3;
    for (std::size_t d = 0; d < devices; ++d) next.compute_s.push_back(work / (1.0 + 2.0 * static_cast<double>(d)));
    next.param_bytes = static_cast<std::int64_t>(uniform(1e6, 5e7));
    next.output_bytes = static_cast<std::int64_t>(uniform(1e4, 1e6));
    total_params += next.param_bytes;
    problem.regions.push_back(std::move(next));
  }
  for (std::size_t d = 0; d < devices; ++d) {
    problem.devices[d].capacity_bytes = total_params / static_cast<std::int64_t>(devices + 1);
    problem.stream_s_per_byte[d] = 1.0 / 2e10;
    for (std::size_t to = 0; to < devices; ++to) {
      if (to != d) problem.transfer_s_per_byte[d][to] = 1.0 / 1e10;
    }
  }
  return problem;
}

}  // namespace tt::test
