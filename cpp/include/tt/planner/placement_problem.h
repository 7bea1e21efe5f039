// The placement problem: regions of a model's graph, the devices they may run on, and costs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tt {

// One region of the graph. A plain value, copied freely.
struct PlacementRegion {
  std::int64_t id = 0;                 // unique within its problem
  std::vector<std::int64_t> deps;      // ids of regions listed earlier whose output this one reads
  std::vector<double> compute_s;       // per device: seconds to compute there; +inf = cannot run there
  std::int64_t param_bytes = 0;        // parameter bytes, resident on its device or streamed each call
  std::int64_t output_bytes = 0;       // bytes a dependent region on another device must receive
};

// One device a region may be placed on.
struct PlacementDevice {
  std::string name;                    // unique within its problem, used in messages
  std::int64_t capacity_bytes = 0;     // room for resident parameters
};

// Everything the search and the cost model need. Regions are listed in a topological order:
// every dependency names a region listed before it.
struct PlacementProblem {
  std::vector<PlacementRegion> regions;
  std::vector<PlacementDevice> devices;
  std::vector<std::vector<double>> transfer_s_per_byte;  // [from][to] device; 0 on the diagonal
  // Per device: seconds to move it one parameter byte that is not resident (from host or
  // disk), paid on every call.
  std::vector<double> stream_s_per_byte;
};

// A complete placement: where each region runs and whether its parameters stay there.
struct Assignment {
  std::vector<std::int32_t> device;    // per region: index into PlacementProblem::devices
  std::vector<bool> resident;          // per region: parameters kept on its device (else streamed)

  friend bool operator==(const Assignment&, const Assignment&) = default;
};

// A validated problem's dependency structure by position, computed once for repeated evaluation.
struct ProblemIndex {
  std::vector<std::vector<std::int32_t>> deps;  // per region: positions of its dependencies, as listed
  std::vector<std::int32_t> residency_order;    // positions by param_bytes descending, then position
};

// Validates `problem` and indexes it. Throws Error(InvalidArgument) naming the offending region
// or device when there is no device, device names repeat or are empty, a capacity or byte count
// is negative, a cost matrix has the wrong size, a transfer or stream cost is negative or not
// finite, a transfer cost on the diagonal is not 0, a compute time is negative or NaN, region
// ids repeat, or a dependency is unknown, repeated, the region itself or listed after it.
ProblemIndex index_problem(const PlacementProblem& problem);

// Throws Error(InvalidArgument) unless `assignment` has one device (in range) and one residency
// flag per region of `problem`.
void check_assignment(const PlacementProblem& problem, const Assignment& assignment);

}  // namespace tt
