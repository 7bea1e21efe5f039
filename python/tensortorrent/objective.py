"""What a plan optimises: tt.Objective and the weights that turn a plan's measures into one value.

Every plan has three measures per call: its latency (the makespan), its bottleneck (the
busiest device's or link's time, which bounds throughput when calls are pipelined) and
its traffic (bytes moved between tiers: parameters streamed to a device plus activations
crossing devices). An objective weighs them; lower is better.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import ConfigTypeError, ConfigValueError


class Objective(enum.Enum):
    """LATENCY: the shortest call (default). THROUGHPUT: the least loaded busiest
    resource, for many calls in flight. MEMORY: the fewest bytes moved per call, which
    keeps weights resident and work on as few devices as possible. BALANCED: all three at
    once. WEIGHTED: CompileConfig.objective_weights decides."""

    LATENCY = "latency"
    THROUGHPUT = "throughput"
    MEMORY = "memory"
    BALANCED = "balanced"
    WEIGHTED = "weighted"


WEIGHT_NAMES = ("latency", "throughput", "memory")

# Each measure's weight. Traffic is turned into seconds at the slowest link of the
# machine, so that all three terms share one unit.
PRESET_WEIGHTS: dict[Objective, dict[str, float]] = {
    Objective.LATENCY: {"latency": 1.0, "throughput": 0.0, "memory": 0.0},
    Objective.THROUGHPUT: {"latency": 0.0, "throughput": 1.0, "memory": 0.0},
    Objective.MEMORY: {"latency": 0.0, "throughput": 0.0, "memory": 1.0},
    Objective.BALANCED: {"latency": 1.0, "throughput": 1.0, "memory": 1.0},
}

# Ties under MEMORY (equal traffic) and THROUGHPUT are broken by latency: a small weight
# that cannot outweigh a real difference in the main term.
TIE_BREAK = 1e-6


def as_objective(value: object) -> Objective:
    """An Objective from an Objective or its name ("latency", ...)."""
    if isinstance(value, Objective):
        return value
    if isinstance(value, str):
        try:
            return Objective(value.lower())
        except ValueError:
            pass
        choices = ", ".join(o.value for o in Objective)
        raise ConfigValueError(f"CompileConfig.objective: expected one of {choices}, got {value!r}")
    raise ConfigTypeError(
        f"CompileConfig.objective: expected a tt.Objective or its name, got {type(value).__name__} ({value!r})"
    )


def check_weights(objective: Objective, weights: object) -> dict[str, float] | None:
    """The validated objective_weights: required (a dict of non-negative numbers named
    latency/throughput/memory, one at least positive) for WEIGHTED, refused otherwise."""
    if objective is not Objective.WEIGHTED:
        if weights is not None:
            raise ConfigValueError(
                f"CompileConfig.objective_weights: only used with objective=Objective.WEIGHTED, "
                f"got weights with objective={objective.name}"
            )
        return None
    if weights is None:
        raise ConfigValueError(
            "CompileConfig.objective_weights: objective=WEIGHTED needs them, a dict like "
            "{'latency': 1.0, 'memory': 0.5}; got none"
        )
    if not isinstance(weights, Mapping):
        raise ConfigTypeError(
            "CompileConfig.objective_weights: expected a dict like {'latency': 1.0, 'memory': 0.5} "
            f"with objective=WEIGHTED, got {type(weights).__name__}"
        )
    unknown = sorted(str(k) for k in weights if k not in WEIGHT_NAMES)
    if unknown:
        raise ConfigValueError(f"CompileConfig.objective_weights: expected keys among {WEIGHT_NAMES}, got {unknown}")
    checked = {}
    for name in WEIGHT_NAMES:
        value = weights.get(name, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigTypeError(
                f"CompileConfig.objective_weights[{name!r}]: expected a number, got {type(value).__name__}"
            )
        if not math.isfinite(value) or value < 0:
            raise ConfigValueError(
                f"CompileConfig.objective_weights[{name!r}]: expected a finite number >= 0, got {value}"
            )
        checked[name] = float(value)
    if not any(checked.values()):
        got = "an empty dict" if not weights else "all zero"
        raise ConfigValueError(f"CompileConfig.objective_weights: expected at least one weight > 0, got {got}")
    return checked


@dataclass(frozen=True)
class PlanMeasures:
    """One plan's measures per call."""

    latency_s: float
    bottleneck_s: float
    traffic_bytes: int


@dataclass(frozen=True)
class ObjectiveFunction:
    """An objective made concrete for one machine: the value of a plan's measures."""

    objective: Objective
    weights: dict[str, float]
    seconds_per_traffic_byte: float  # at the machine's slowest link

    @classmethod
    def make(cls, objective: Objective, weights: dict[str, float] | None, slowest_link_bytes_per_s: float):
        chosen = dict(weights if objective is Objective.WEIGHTED else PRESET_WEIGHTS[objective])
        if chosen["latency"] == 0.0:
            chosen["latency"] = TIE_BREAK
        return cls(objective, chosen, 1.0 / slowest_link_bytes_per_s if slowest_link_bytes_per_s > 0 else 0.0)

    def value(self, measures: PlanMeasures) -> float:
        w = self.weights
        return (
            w["latency"] * measures.latency_s
            + w["throughput"] * measures.bottleneck_s
            + w["memory"] * measures.traffic_bytes * self.seconds_per_traffic_byte
        )

    def describe(self) -> str:
        terms = ", ".join(f"{name} x{weight:g}" for name, weight in self.weights.items() if weight)
        return f"{self.objective.name} ({terms}; traffic counted at the slowest link)"
