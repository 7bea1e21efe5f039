// Phase two of the placement search: moves of single regions and same-device runs that pay off.
#pragma once

#include <cstdint>
#include <vector>

#include "tt/planner/scoring.h"

namespace tt {

// Moving regions [first, last] (positions, inclusive) to `device`.
struct PlacementMove {
  std::int32_t first = 0;
  std::int32_t last = 0;
  std::int32_t device = 0;
};

// The moves tried around `devices`: every region to every other device it can run on, then
// every maximal run of two or more consecutive regions on one device to every other device
// all of them can run on. Deterministic order.
std::vector<PlacementMove> neighbor_moves(const PlacementProblem& problem, const std::vector<std::int32_t>& devices);

// Improves `devices` (valued `value`) in up to `passes` rounds, and returns its final value.
// Each round values every neighbor move of the current placement (on `threads` threads),
// then, from the most improving move down, applies each improving move to the current
// placement and keeps it when the combination still improves. When no move improves, the
// round values every pair of the 16 best moves on disjoint regions instead and applies the
// best pair if it improves; when that fails too, it stops early. Every value computed is
// offered to `ranked`. The result does not depend on `threads`.
double improve_locally(const PlacementScorer& scorer, std::vector<std::int32_t>& devices, double value,
                       std::int32_t passes, std::int32_t threads, RankedPlacements& ranked);

}  // namespace tt
