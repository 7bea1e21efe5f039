// What the placement search minimizes without an evaluator: a weighted sum of the model's measures.
#pragma once

#include "tt/planner/placement_cost.h"

namespace tt {

// Weights of the measures in a placement's value (see weighted_value). The default is the
// latency alone. A plain value; checked by check_weights.
struct ObjectiveWeights {
  double latency = 1.0;           // per second of PlacementMeasures::latency_s
  double bottleneck = 0.0;        // per second of PlacementMeasures::bottleneck_s
  double traffic_per_byte = 0.0;  // per byte of PlacementMeasures::traffic_bytes

  friend bool operator==(const ObjectiveWeights&, const ObjectiveWeights&) = default;
};

// Throws Error(InvalidArgument) naming the field unless every weight is finite and >= 0, and
// naming all three unless at least one is > 0.
void check_weights(const ObjectiveWeights& weights);

// True when only the latency counts (bottleneck and traffic weigh 0): the value is then the
// latency times a positive constant, and the searches can use latency() alone.
bool latency_only(const ObjectiveWeights& weights);

// latency * latency_s + bottleneck * bottleneck_s + traffic_per_byte * traffic_bytes, leaving
// out the terms weighted 0; +inf when latency_s is not finite (a region placed where it
// cannot run), whatever the weights. With the default weights it is exactly latency_s.
double weighted_value(const ObjectiveWeights& weights, const PlacementMeasures& measures);

}  // namespace tt
