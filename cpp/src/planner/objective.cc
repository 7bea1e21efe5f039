// Checking objective weights and combining the measures they weigh.
#include "tt/planner/objective.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "tt/common/error.h"

namespace tt {
namespace {

void check_weight(const char* name, double value) {
  if (std::isfinite(value) && value >= 0) return;
  std::ostringstream message;
  message << "objective weights: " << name << " must be finite and >= 0, got " << value;
  throw Error(ErrorCode::InvalidArgument, message.str());
}

}  // namespace

void check_weights(const ObjectiveWeights& weights) {
  check_weight("latency", weights.latency);
  check_weight("bottleneck", weights.bottleneck);
  check_weight("traffic_per_byte", weights.traffic_per_byte);
  if (weights.latency == 0 && weights.bottleneck == 0 && weights.traffic_per_byte == 0) {
    throw Error(ErrorCode::InvalidArgument,
                "objective weights: expected at least one of latency, bottleneck and traffic_per_byte > 0, got all 0");
  }
}

bool latency_only(const ObjectiveWeights& weights) { return weights.bottleneck == 0 && weights.traffic_per_byte == 0; }

double weighted_value(const ObjectiveWeights& weights, const PlacementMeasures& measures) {
  // Traffic stays finite where a region cannot run, so it alone would not rule the placement out.
  if (!std::isfinite(measures.latency_s)) return std::numeric_limits<double>::infinity();
  // Terms weighted 0 are skipped rather than multiplied: 1 * latency_s + 0 is then latency_s
  // bit for bit, so the default weights reproduce the latency-only search exactly.
  double value = 0.0;
  if (weights.latency != 0) value += weights.latency * measures.latency_s;
  if (weights.bottleneck != 0) value += weights.bottleneck * measures.bottleneck_s;
  if (weights.traffic_per_byte != 0) value += weights.traffic_per_byte * static_cast<double>(measures.traffic_bytes);
  return value;
}

}  // namespace tt
