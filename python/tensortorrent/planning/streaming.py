"""Weights streamed from disk under a RAM budget: which regions stream, and the program that runs it.

A region's parameters stream when only that region reads them (a tied weight, a model
output or a mutated buffer stays resident). Residents are loaded once into the core's
resident arena; a streamed region's weights are `Load`ed from their file range into the
call's arena before it computes and freed after it. With prefetch distance d, the loads
of the next d streamed regions are issued before a region computes, so reads overlap
compute and at most d + 1 streamed regions' weights are held at once. Activations are
torch's tensors, planned and counted as torch-owned buffers. The same Program is
simulated and executed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .. import _core
from ..errors import MemoryCapacityError
from ..observe.units import format_bytes

K = _core.InstructionKind
LIFE = _core.BufferLifetime
RAM, DISK = 0, 1
UNBOUNDED = 1 << 62  # bytes: a capacity that never binds
CPU_QUEUE, IO_QUEUE = 0, 1


@dataclass(frozen=True)
class WeightRange:
    """Where a bound tensor's bytes are in the weights file."""

    offset: int  # absolute, in the file
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    crc32c: int = -1  # the range's own checksum, checked by every load of it; -1: none recorded


@dataclass(frozen=True)
class WeightsFile:
    path: str
    size: int
    chunk_bytes: int  # 0: no digests
    chunk_sha256: tuple[str, ...]
    ranges: dict[int, WeightRange]  # bound slot -> its bytes


@dataclass(frozen=True)
class StreamedWeight:
    slot: int
    buffer: int  # the host buffer its Load writes
    dtype: torch.dtype
    shape: tuple[int, ...]
    nbytes: int


@dataclass(frozen=True)
class StreamingPlan:
    program: _core.Program
    prefetch: int
    budget_bytes: int
    resident: dict[int, int]  # bound slot -> resident buffer id
    streamed: dict[int, tuple[StreamedWeight, ...]]  # region -> its streamed weights
    region_of: dict[int, int]  # compute instruction id -> region
    streamed_bytes: int  # read from disk on every call
    region_names: tuple[str, ...]


def streamable_regions(runner) -> dict[int, list[int]]:
    """Per region, the bound slots only it reads: the weights it could stream."""
    readers: dict[int, set[int]] = {}
    for region, kernel in enumerate(runner.kernels):
        for slot in kernel.in_slots:
            if slot < runner.bound_count:
                readers.setdefault(slot, set()).add(region)
    pinned = set(runner.kept_slots) | {slot for slot, _ in runner.outputs if slot is not None}
    own: dict[int, list[int]] = {}
    for slot, regions in sorted(readers.items()):
        if len(regions) == 1 and slot not in pinned:
            own.setdefault(next(iter(regions)), []).append(slot)
    return own


def plan_streaming(
    runner, names: Sequence[str], weights: WeightsFile, budget_bytes: int, prefetch: int, cpu_slots: int, io_depth: int
) -> StreamingPlan:
    """Keeps resident what fits in `budget_bytes` and streams the rest, largest regions
    first; MemoryCapacityError when even streaming every region does not fit."""
    own = streamable_regions(runner)
    order = sorted(own, key=lambda r: (-sum(weights.ranges[s].nbytes for s in own[r]), r))
    streamed: set[int] = set()
    for count in range(len(order) + 1):
        streamed = set(order[:count])
        try:
            return build_streaming_program(
                runner, names, weights, streamed, budget_bytes, prefetch, cpu_slots, io_depth
            )
        except MemoryCapacityError as error:
            last = error
    everything = build_streaming_program(runner, names, weights, streamed, UNBOUNDED, prefetch, cpu_slots, io_depth)
    needed = everything.program.memory_plan.arena_bytes[RAM]
    raise MemoryCapacityError(
        f"ram_budget_bytes={budget_bytes} ({format_bytes(budget_bytes)}) is below the smallest working set this "
        f"model can stream with: {needed} bytes ({format_bytes(needed)}), with every streamable region streamed "
        f"at prefetch distance {prefetch} ({last})"
    )


def build_streaming_program(
    runner,
    names,
    weights: WeightsFile | None,
    streamed: set[int],
    budget_bytes: int,
    prefetch: int,
    cpu_slots: int,
    io_depth: int,
    predicted: dict[int, tuple[float, float]] | None = None,
    times: Sequence[tuple[float, float]] | None = None,
) -> StreamingPlan:
    """The program that streams the weights of the regions in `streamed` from `weights`;
    with `weights` None, every weight stays where it is (the model's own tensors, counted
    as torch-owned residents) and nothing streams. `predicted` gives regions' predicted
    (start, end) in microseconds, `times` every instruction's (a simulation of this same
    program). Raises MemoryCapacityError (from the core) when the RAM the program needs
    exceeds `budget_bytes`."""
    builder = _Builder(
        runner, names, weights, streamed if weights is not None else set(), prefetch, predicted or {}, times
    )
    builder.run()
    tiers = [_core.Tier("ram", _core.TierKind.Host, budget_bytes), _core.Tier("disk", _core.TierKind.Disk)]
    queues = [_core.Queue("cpu", _core.QueueKind.Compute, cpu_slots), _core.Queue("io", _core.QueueKind.Io, io_depth)]
    files = (
        []
        if weights is None
        else [_core.FileSpec(weights.path, weights.size, weights.chunk_bytes, list(weights.chunk_sha256))]
    )
    program = _core.Program(tiers, queues, files, builder.buffers, builder.instructions, builder.outputs)
    return StreamingPlan(
        program=program,
        prefetch=prefetch,
        budget_bytes=budget_bytes,
        resident=builder.resident,
        streamed={r: tuple(ws) for r, ws in builder.streamed.items()},
        region_of=builder.region_of,
        streamed_bytes=sum(w.nbytes for ws in builder.streamed.values() for w in ws),
        region_names=tuple(names),
    )


class _Builder:
    def __init__(self, runner, names, weights, streamed: set[int], prefetch: int, predicted, times) -> None:
        self.runner, self.names, self.weights, self.prefetch = runner, names, weights, prefetch
        self.predicted, self.times = predicted, times
        self.own = streamable_regions(runner)
        self.streamed_regions = [r for r in range(len(runner.kernels)) if r in streamed and r in self.own]
        self.buffers: list[_core.Buffer] = []
        self.instructions: list[_core.Instruction] = []
        self.outputs: list[int] = []
        self.resident: dict[int, int] = {}
        self.streamed: dict[int, list[StreamedWeight]] = {}
        self.region_of: dict[int, int] = {}
        self.slot_buffer: dict[int, int] = {}  # slot -> buffer id (residents, inputs, activations)
        self.producer: dict[int, int] = {}  # slot -> compute instruction id
        self.loads: dict[int, list[int]] = {}  # streamed region -> its load ids
        self.weight_free: dict[int, int] = {}  # streamed region -> the Free of its weights
        self.reader_computes: dict[int, list[int]] = {}  # activation slot -> compute instructions reading it

    def buffer(self, tier: int, nbytes: int, lifetime, label: str, **extra) -> int:
        self.buffers.append(_core.Buffer(len(self.buffers), tier, nbytes, lifetime=lifetime, label=label, **extra))
        return len(self.buffers) - 1

    def emit(self, kind, queue: int, reads, writes, deps, label: str, region: int = -1) -> int:
        ident = len(self.instructions)
        if self.times is not None:
            start, end = self.times[ident]
        else:
            start, end = self.predicted.get(region, (-1.0, -1.0)) if kind == K.Compute else (-1.0, -1.0)
        self.instructions.append(
            _core.Instruction(
                ident,
                kind,
                region=region,
                device=("cpu", "io")[queue],
                label=label,
                deps=sorted(set(deps)),
                predicted_start_us=start,
                predicted_end_us=end,
                queue=queue,
                reads=list(reads),
                writes=list(writes),
            )
        )
        return ident

    def run(self) -> None:
        runner = self.runner
        streamed_slots = {s for r in self.streamed_regions for s in self.own[r]}
        for slot in range(runner.bound_count):
            if slot in streamed_slots:
                continue
            if self.weights is None:  # the model's own tensor, used in place
                self.slot_buffer[slot] = self.buffer(
                    RAM, runner.slot_bytes[slot], LIFE.Resident, f"weight {slot}", torch_owned=True
                )
                continue
            place = self.weights.ranges[slot]
            self.resident[slot] = self.slot_buffer[slot] = self.buffer(
                RAM, place.nbytes, LIFE.Resident, f"weight {slot}", shape=list(place.shape)
            )
        first_activation = runner.bound_count
        readers_left = list(runner.readers)
        # Inputs: the caller's memory, never freed by the program.
        produced = {slot for kernel in runner.kernels for slot in kernel.out_slots}
        for kernel in runner.kernels:
            for slot in kernel.in_slots:
                if slot >= first_activation and slot not in produced and slot not in self.slot_buffer:
                    self.slot_buffer[slot] = self.buffer(RAM, 0, LIFE.Input, f"input {slot}")
        for region, kernel in enumerate(runner.kernels):
            self.issue_loads_through(self.next_streamed_index(region) + self.prefetch)
            reads = [self.slot_buffer[s] for s in kernel.in_slots if s in self.slot_buffer]
            reads += [w.buffer for w in self.streamed.get(region, [])]
            deps = [self.producer[s] for s in kernel.in_slots if s in self.producer]
            deps += self.loads.get(region, [])
            writes = []
            for slot in kernel.out_slots:
                self.slot_buffer[slot] = self.buffer(
                    RAM, runner.slot_bytes[slot], LIFE.Transient, f"{self.names[region]} out", torch_owned=True
                )
                writes.append(self.slot_buffer[slot])
            compute = self.emit(K.Compute, CPU_QUEUE, reads, writes, deps, self.names[region], region)
            self.region_of[compute] = region
            for slot in kernel.out_slots:
                self.producer[slot] = compute
            for slot in kernel.transient_in_slots:
                self.reader_computes.setdefault(slot, []).append(compute)
            if region in self.streamed:
                self.weight_free[region] = self.emit(
                    K.Free,
                    CPU_QUEUE,
                    [w.buffer for w in self.streamed[region]],
                    [],
                    [compute],
                    f"free {self.names[region]} weights",
                )
            self.free_activations(region, kernel, readers_left)
        for slot in sorted(runner.kept_slots):
            if slot in self.producer:
                self.outputs.append(self.slot_buffer[slot])

    def next_streamed_index(self, region: int) -> int:
        """Index (in streaming order) of the first streamed region at or after `region`."""
        return sum(1 for r in self.streamed_regions if r < region)

    def issue_loads_through(self, last: int) -> None:
        for index in range(min(last, len(self.streamed_regions) - 1) + 1):
            region = self.streamed_regions[index]
            if region in self.loads:
                continue
            # At most prefetch + 1 streamed regions' weights at once: wait for an earlier one's free.
            earlier = index - self.prefetch - 1
            deps = [self.weight_free[self.streamed_regions[earlier]]] if earlier >= 0 else []
            self.loads[region], self.streamed[region] = [], []
            for slot in self.own[region]:
                place = self.weights.ranges[slot]
                source = self.buffer(
                    DISK,
                    place.nbytes,
                    LIFE.Resident,
                    f"weight {slot} on disk",
                    file=0,
                    file_offset=place.offset,
                    crc32c=place.crc32c,
                )
                target = self.buffer(RAM, place.nbytes, LIFE.Transient, f"{self.names[region]} weight {slot}")
                self.loads[region].append(
                    self.emit(K.Load, IO_QUEUE, [source], [target], deps, f"load {self.names[region]} weight {slot}")
                )
                self.streamed[region].append(StreamedWeight(slot, target, place.dtype, place.shape, place.nbytes))

    def free_activations(self, region: int, kernel, readers_left: list[int]) -> None:
        """Frees the activations whose last reader is `region`, and its outputs nobody reads."""
        runner = self.runner
        done = []
        for slot in kernel.transient_in_slots:
            readers_left[slot] -= 1
            if readers_left[slot] == 0:
                done.append(slot)
        done += [s for s in kernel.out_slots if runner.readers[s] == 0 and s not in runner.kept_slots]
        if not done:
            return
        readers = {self.producer[s] for s in done}
        for slot in done:
            readers.update(self.reader_computes.get(slot, ()))
        self.emit(
            K.Free, CPU_QUEUE, [self.slot_buffer[s] for s in done], [], readers, f"free {self.names[region]} inputs"
        )


def in_memory_plan(runner, regions, plan, budget_bytes: int | None) -> StreamingPlan:
    """The Program of a CPU plan whose weights stay the model's own tensors: nothing
    streams; the plan's predicted region times carry over."""
    predicted = {
        i.region: (i.predicted_start_us, i.predicted_end_us) for i in plan.schedule.instructions if i.region >= 0
    }
    return build_streaming_program(
        runner,
        [region.name for region in regions],
        None,
        set(),
        budget_bytes if budget_bytes is not None else UNBOUNDED,
        0,
        plan.max_concurrent,
        1,
        predicted,
    )


def simulate_plan(plan: StreamingPlan, region_seconds: Sequence[float], read_bytes_per_s: float):
    """The simulator's run of the plan's program: regions take `region_seconds`, loads
    their bytes at `read_bytes_per_s`, frees no time."""
    instructions = plan.program.schedule.instructions
    seconds = [
        region_seconds[i.region] if i.kind == K.Compute else (-1.0 if i.kind == K.Load else 0.0) for i in instructions
    ]
    return _core.simulate_program(plan.program, seconds, queue_bytes_per_s=[0.0, read_bytes_per_s])


def with_predictions(
    plan: StreamingPlan, runner, weights: WeightsFile, simulated, cpu_slots: int, io_depth: int
) -> StreamingPlan:
    """The same program with `io_depth` loads in flight, its instructions carrying the
    simulated start and end times."""
    times = [(start * 1e6, end * 1e6) for start, end in zip(simulated.start_s, simulated.end_s)]
    streamed = set(plan.streamed)
    return build_streaming_program(
        runner,
        plan.region_names,
        weights,
        streamed,
        plan.budget_bytes,
        plan.prefetch,
        cpu_slots,
        io_depth,
        times=times,
    )
