"""CompileConfig, every knob of a compile, and the TT_* environment variables.

Both are validated strictly: a wrong type raises ConfigTypeError (a TypeError), a wrong
value ConfigValueError (a ValueError), and the message names the field.
"""

from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass, fields

from .errors import ConfigTypeError, ConfigValueError
from .objective import Objective, as_objective, check_weights

REGION_BACKENDS = ("eager", "inductor", "auto")
WEIGHT_FORMATS = ("int8", "int4")
GROUP_SIZES = (32, 64, 128, 256)  # int4 groups torch's CPU kernel takes
MAX_IO_QUEUE_DEPTH = 1024  # the I/O engine's most threads (cpp/src/storage/io_engine.cc)


@dataclass(frozen=True)
class CompileConfig:
    """How tt.compile partitions, schedules and runs a model.

    max_region_nodes: most graph operations in one region. Regions also end at layer
        boundaries (the blocks of a ModuleList, such as a transformer's layers).
    prefer_direct_path: when the plan is a single resident region, call it directly
        instead of through the executor. TT_DIRECT_PATH=0/1 overrides this.
    stall_timeout_s: a call fails with ExecutionStalled when no region finishes for this
        many seconds.
    max_concurrent_regions: most regions of one call that run at the same time; None
        means one per usable CPU core.
    ram_budget_bytes, vram_budget_bytes, disk_budget_bytes: explicit budgets for host RAM,
        each accelerator's memory and spill/cache disk space; None lets the resolver take
        them from cgroup limits, then from the operating system (tensortorrent doctor
        shows the result and where it came from).
    cpu_budget: CPU cores to use; None means the cgroup quota, else the affinity mask.
    spill_dir: where spilled or cached data goes; None means TT_SPILL_DIR where set, else
        ~/.cache/tensortorrent.
    activation_budget_bytes: the most bytes of activations (region outputs) a call keeps in
        RAM at once; those beyond it are written to a spill file and read back before they
        are used (both on the I/O engine, while other regions compute). None: no limit
        but the RAM budget.
    allow_tmpfs_spill: spill into a directory held in RAM (tmpfs, ramfs) all the same;
        False refuses one, since spilling there saves no RAM.
    allow_training: also capture the model in training mode, so that after
        compiled.train() calls run that program with autograd (dropout active, batch
        norm on batch statistics) and gradients reach the model's parameters; False
        (the default) compiles for inference only, and train() says how to enable it.
    objective: what the planner optimises, a tt.Objective or its name (default LATENCY;
        see tt.Objective).
    objective_weights: with Objective.WEIGHTED only, the weight of each measure, e.g.
        {"latency": 1.0, "throughput": 0.0, "memory": 0.5}; missing names weigh 0.
    prefetch_distance: when weights stream from disk, how many streamed regions' reads
        are issued ahead of the region computing, counted in bytes of the largest
        streamed region (more regions ahead where they are smaller; 0: read the next
        weights only once those of the region computing fit beside them in one
        largest region's bytes); None lets the planner choose among 3, 2, 1 and 0 by
        simulating each layout that fits the budget.
    io_queue_depth: reads the I/O engine keeps in flight when weights stream; None
        measures the weights file's device (buffered and O_DIRECT at 2, 4 and 8 reads in
        flight) once per device (cached for a week, see tensortorrent doctor) and takes
        the fastest.
    region_backend: how each region's operations run: "eager" (the default: op by op,
        as PyTorch runs them), "inductor" (each region compiled by torch.compile's inductor
        backend at compile time; inductor caches its code on disk, so compiling the same
        model again is quick) or "auto" (each region keeps whichever of the two ran faster
        when both were timed at compile time). explain() shows each region's choice and
        compile time. A region placed on a GPU is compiled for that GPU (and, under
        "auto", timed there) once the plan is made; the training program runs eagerly.
        Under every backend, an inference region's matrix products
        run on oneDNN wherever it timed faster than aten's BLAS on this machine
        (runtime/onednn_linear.py).
    validate_numerics: after building, run the compiled module once on the example
        inputs against eager PyTorch (the captured program, op by op) and raise
        tt.NumericsError where an output differs beyond atol and rtol. None (the default)
        checks whenever regions run inductor's code.
    atol, rtol: the tolerances of that check, as in torch.allclose: |compiled - eager| <=
        atol + rtol * |eager|; None takes them per dtype (float32: atol 1e-4, rtol 1e-3;
        float16 and bfloat16: 1e-2 both; float64: 1e-7 both; exact elsewhere).
    allow_disk_streaming: False keeps every weight in RAM: a RAM budget that cannot hold
        them (with the activations) is then a tt.MemoryCapacityError before anything
        runs, instead of weights read from disk on every call.
    weight_format: "int8" stores every linear layer's weight as int8 values with one
        scale per output channel (weight-only: activations stay in their dtype), in RAM,
        on disk and over every link, at about a quarter of float32's bytes; "int4" as
        4-bit values with a scale per group_size inputs (about an eighth; a layer whose
        shape int4 cannot hold is int8); products compute from them directly
        (docs/compressed-weights.md). None (the default) keeps the weights as the model
        holds them. Inference only.
    group_size: with weight_format="int4", the inputs sharing a scale: 32, 64, 128
        (the default) or 256.
    """

    max_region_nodes: int = 256
    prefer_direct_path: bool = True
    stall_timeout_s: float = 300.0
    max_concurrent_regions: int | None = None
    ram_budget_bytes: int | None = None
    vram_budget_bytes: int | None = None
    disk_budget_bytes: int | None = None
    cpu_budget: int | None = None
    spill_dir: str | None = None
    objective: Objective | str = Objective.LATENCY
    objective_weights: dict[str, float] | None = None
    prefetch_distance: int | None = None
    io_queue_depth: int | None = None
    allow_disk_streaming: bool = True
    activation_budget_bytes: int | None = None
    allow_tmpfs_spill: bool = False
    allow_training: bool = False
    region_backend: str = "eager"
    validate_numerics: bool | None = None
    atol: float | None = None
    rtol: float | None = None
    weight_format: str | None = None
    group_size: int = 128

    def __new__(cls, *args: object, **kwargs: object) -> CompileConfig:
        # Here, before the generated __init__ raises Python's own TypeError, so that a name
        # the earlier project documented gets what to use instead.
        for name in kwargs:
            if name not in _FIELD_NAMES:
                raise ConfigTypeError(unknown_field_message(name))
        return super().__new__(cls)

    @classmethod
    def polite(cls, **overrides: object) -> CompileConfig:
        """A config that leaves the machine usable by others: half the CPU cores and half
        the RAM the budget resolver finds available (the cgroup's limit or the OS's
        available memory, less its reserve) as ram_budget_bytes. `overrides` set any
        other field, or replace either figure."""
        from .hardware.budgets import resolve_budgets  # the resolver reads a config: imported when called

        budgets = resolve_budgets(cls())
        figures = {"cpu_budget": max(1, budgets.cpus.amount // 2), "ram_budget_bytes": max(1, budgets.ram.amount // 2)}
        return cls(**{**figures, **overrides})

    def __post_init__(self) -> None:
        _check_int("max_region_nodes", self.max_region_nodes, minimum=1)
        _check_bool("prefer_direct_path", self.prefer_direct_path)
        _check_bool("allow_disk_streaming", self.allow_disk_streaming)
        _check_bool("allow_tmpfs_spill", self.allow_tmpfs_spill)
        _check_bool("allow_training", self.allow_training)
        _check_positive_seconds("stall_timeout_s", self.stall_timeout_s)
        _check_choice("region_backend", self.region_backend, REGION_BACKENDS)
        _check_int("group_size", self.group_size, minimum=1)
        if self.group_size not in GROUP_SIZES:
            raise ConfigValueError(
                f"CompileConfig.group_size: expected one of {', '.join(map(str, GROUP_SIZES))}, got {self.group_size}"
            )
        if self.weight_format is not None:
            _check_choice("weight_format", self.weight_format, WEIGHT_FORMATS, "None or ")
            if self.allow_training:
                raise ConfigValueError(
                    f"CompileConfig.weight_format={self.weight_format!r} is for inference: expected "
                    "allow_training=False, got True"
                )
        if self.validate_numerics is not None:
            _check_bool("validate_numerics", self.validate_numerics)
        for name in ("atol", "rtol"):
            if getattr(self, name) is not None:
                _check_tolerance(name, getattr(self, name))
        for name in (
            "max_concurrent_regions",
            "ram_budget_bytes",
            "vram_budget_bytes",
            "disk_budget_bytes",
            "cpu_budget",
            "activation_budget_bytes",
        ):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), minimum=1)
        if self.prefetch_distance is not None:
            _check_int("prefetch_distance", self.prefetch_distance, minimum=0)
        if self.io_queue_depth is not None:
            _check_int("io_queue_depth", self.io_queue_depth, minimum=1, maximum=MAX_IO_QUEUE_DEPTH)
        if self.spill_dir is not None and (not isinstance(self.spill_dir, str) or not self.spill_dir):
            raise (ConfigValueError if isinstance(self.spill_dir, str) else ConfigTypeError)(
                f"CompileConfig.spill_dir: expected a non-empty path string, got {self.spill_dir!r}"
            )
        if self.spill_dir is not None and os.path.exists(self.spill_dir) and not os.path.isdir(self.spill_dir):
            raise ConfigValueError(f"CompileConfig.spill_dir: expected a directory, got {self.spill_dir!r}, a file")
        # Normalised in place (the dataclass is frozen): names become Objective members.
        objective = as_objective(self.objective)
        object.__setattr__(self, "objective", objective)
        object.__setattr__(self, "objective_weights", check_weights(objective, self.objective_weights))

    @property
    def checks_numerics(self) -> bool:
        """Whether building ends with the numerics check (validate_numerics, or its default)."""
        if self.validate_numerics is not None:
            return self.validate_numerics
        return self.region_backend != "eager"

    def as_dict(self) -> dict[str, object]:
        """The fields and their values as JSON-able data, for reports and artifacts."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["objective"] = self.objective.value
        return values


# Fields of the earlier TensorTorrent's CompileConfig, and what takes their place here.
FORMER_FIELDS = {
    "allow_gpu": 'use tt.compile(..., devices="cpu") for allow_gpu=False (devices="auto", the default, uses the GPUs)',
    "allow_nvme_streaming": "use allow_disk_streaming (weights stream from any disk, NVMe or not)",
    "allow_concurrent_regions": "use max_concurrent_regions=1 for allow_concurrent_regions=False",
    "use_torch_compile": 'use region_backend="inductor" (or "auto": per region, whichever ran faster)',
    "measure_regions": "nothing to set: every region is timed on this machine at compile time (explain() shows "
    "the times)",
    "profile_level": "nothing to set: every region is timed on this machine at compile time; "
    "compiled.profile(*inputs) times them again and compiled.trace(path) writes a call's timeline",
}


def unknown_field_message(name: str) -> str:
    """What ConfigTypeError says of a field CompileConfig does not have: what to use instead."""
    if name in FORMER_FIELDS:
        return f"CompileConfig has no field {name!r} (the earlier TensorTorrent's); {FORMER_FIELDS[name]}"
    close = difflib.get_close_matches(name, _FIELD_NAMES, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"CompileConfig has no field {name!r}; {hint}its fields are {', '.join(_FIELD_NAMES)}"


_FIELD_NAMES = tuple(f.name for f in fields(CompileConfig))


def _type_name(value: object) -> str:
    return type(value).__name__


def _check_int(name: str, value: object, *, minimum: int, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigTypeError(f"CompileConfig.{name}: expected an int, got {_type_name(value)} ({value!r})")
    if value < minimum:
        raise ConfigValueError(f"CompileConfig.{name}: expected an int >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigValueError(f"CompileConfig.{name}: expected an int <= {maximum}, got {value}")


def _check_choice(name: str, value: object, choices: tuple[str, ...], also: str = "") -> None:
    if not isinstance(value, str):
        raise ConfigTypeError(f"CompileConfig.{name}: expected a str, got {_type_name(value)} ({value!r})")
    if value not in choices:
        raise ConfigValueError(
            f"CompileConfig.{name}: expected {also}one of {', '.join(map(repr, choices))}, got {value!r}"
        )


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigTypeError(f"CompileConfig.{name}: expected a bool, got {_type_name(value)} ({value!r})")


def _check_tolerance(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigTypeError(f"CompileConfig.{name}: expected a number, got {_type_name(value)} ({value!r})")
    if not math.isfinite(value) or value < 0:
        raise ConfigValueError(f"CompileConfig.{name}: expected a finite number >= 0, got {value}")


def _check_positive_seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigTypeError(
            f"CompileConfig.{name}: expected a number of seconds, got {_type_name(value)} ({value!r})"
        )
    if not math.isfinite(value) or value <= 0:
        raise ConfigValueError(f"CompileConfig.{name}: expected a finite number of seconds > 0, got {value}")
