// Phase one of the placement search: a beam over regions in order, scored by prefix makespan.
#pragma once

#include <cstdint>
#include <vector>

#include "tt/planner/objective.h"
#include "tt/planner/placement_cost.h"

namespace tt {

// Places the regions one at a time, in the order listed, keeping the `beam_width` best
// partial placements. A partial placement is scored by a lower bound on the makespan of any
// completion: the largest of its prefix's list-schedule makespan, a placed region's end plus
// the longest chain of fastest compute times after it, and the devices' busy time plus the
// fastest compute time still to place, spread over all devices. Ties go to the lower prefix
// makespan, the earlier end of the newest region, then the device vector lexicographically.
// Parameters count as resident while they fit in the room the prefix left on their device
// (the final residency rule needs the whole placement; this is its running estimate).
// Regions never go where they cannot run. Returns up to `beam_width` complete device
// vectors, best score first; a region that can run nowhere yields none.
// With `weights` other than the latency alone (which keep the score above), a partial
// placement is scored by the weighted sum of that makespan bound and lower bounds on the
// bottleneck and the traffic of any completion (see beam.cc); the ties stay as above.
// `weights` must pass check_weights.
// Costs O(regions * devices * beam_width * (deps + devices)) plus copying kept prefixes;
// other weights add, per candidate, the readers of each dependency.
std::vector<std::vector<std::int32_t>> beam_placements(const LatencyModel& model, std::int32_t beam_width,
                                                       const ObjectiveWeights& weights = {});

}  // namespace tt
