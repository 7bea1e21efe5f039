"""An artifact's weights left on disk: their file ranges, meta placeholders, and a check of every chunk.

Used when a RAM budget is given: the weights file is never read whole into memory. Its
header is parsed (and checked) by the core's safetensors reader; residents are then read
into the core's arena and the rest stream on every call.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, replace
from typing import Any

import torch

from .. import core
from ..errors import DataCorruptionError
from ..planning.costs import region_costs, roofline_seconds
from ..planning.lowering import LoweredProgram
from ..planning.streaming import Layout, choose_disk_tier, simulate_plan, with_io_depth
from ..planning.weights_on_disk import WeightFile, WeightRange, WeightsOnDisk, identity_if_intact
from ..storage.file_digests import chunk_digests
from ..storage.read_mode_cache import device_key, remember, remembered
from ..storage.safetensors_file import SAFETENSORS_DTYPES
from ..storage.spill_dir import spill_dir_for
from ..storage.weights_cache import cache_directory, cache_weights
from .plane_program import PlaneProgram
from .program_runner import ProgramRunner
from .streamed_profile import PROFILE_LIMIT_S, profile_streamed

log = logging.getLogger(__name__)

ROOFLINE_COSTS = (
    "regions at their roofline from a measured GEMM rate and memory bandwidth, loads at the measured read speed"
)
PROFILED_COSTS = (
    "regions as a profiling call computed them, streaming each region's weights within the budget; "
    "loads at the read speed that call achieved"
)

CALIBRATION_BYTES = 128 << 20  # read per candidate and round when choosing how to read a weights file
CALIBRATION_ROUNDS = 3  # a shared disk drifts between reads: judge each candidate by its median
DIRECT_PREFERENCE = 0.75  # O_DIRECT wins unless buffered reads are faster than this by more
DEPTH_TOLERANCE = 0.9  # more threads win unless their reads are slower than this by more
QUICK_SAMPLE_BYTES = 4 << 20  # read once for a speed estimate where little streams (small: it counts in RSS)
DISTANCES = (3, 2, 1, 0)  # prefetch distances the planner simulates, when not configured
READ_CANDIDATES = [(mode, threads, 16 << 20) for mode in ("buffered", "direct") for threads in (2, 4, 8)]


@dataclass(frozen=True)
class ReadMode:
    """How the I/O engine reads one weights file, and why."""

    mode: str  # "buffered", "direct" or "auto"
    threads: int  # I/O threads, also the reads in flight
    request_bytes: int
    measured_gbps: float | None  # the calibration's figure; None when not measured
    reason: str

    def describe(self) -> str:
        speed = f", {self.measured_gbps:.2f} GB/s measured" if self.measured_gbps else ""
        return f"{self.mode}, {self.threads} thread(s), {self.request_bytes >> 20} MiB reads ({self.reason}{speed})"


_CHOSEN: dict[str, ReadMode] = {}  # device (major:minor) -> the mode measured on it, in this process


def preferred_read_mode(results) -> tuple[object, str]:
    """The measured candidate to read with, and why: the fastest median, but O_DIRECT when
    its best is within DIRECT_PREFERENCE of a faster buffered read. Buffered reads copy
    every byte out of the page cache on a CPU that streaming needs for compute (and fill a
    page cache that counts against a container's memory); the calibration runs alone.
    Within the mode, the most threads whose median is within DEPTH_TOLERANCE of its best:
    a short calibration read undersells deep queues, which streaming keeps busy."""
    measured = [r for r in results if r.measured]
    fastest = max(measured, key=lambda r: r.gigabytes_per_second)
    direct = max((r for r in measured if r.mode == "direct"), key=lambda r: r.gigabytes_per_second, default=None)
    runs = f"median of {CALIBRATION_ROUNDS} rounds"
    reason = f"the fastest of {len(measured)} measured ({runs}): {fastest.mode}"
    if fastest.mode != "direct" and direct is not None:
        if direct.gigabytes_per_second >= DIRECT_PREFERENCE * fastest.gigabytes_per_second:
            reason = (
                f"direct: within {1 - DIRECT_PREFERENCE:.0%} of the fastest, buffered at "
                f"{fastest.gigabytes_per_second:.2f} GB/s ({runs}), and free of page-cache copies"
            )
            fastest = direct
    close = [
        r
        for r in measured
        if r.mode == fastest.mode and r.gigabytes_per_second >= DEPTH_TOLERANCE * fastest.gigabytes_per_second
    ]
    deepest = max(close, key=lambda r: (r.threads, r.gigabytes_per_second))
    if deepest is not fastest:
        reason += f"; {deepest.threads} threads, within {1 - DEPTH_TOLERANCE:.0%} of {fastest.threads}"
    return deepest, reason


def _measured_mode(path: str, key: str) -> ReadMode:
    """Measures every candidate on `path`, takes the preferred one and remembers it for the device."""
    measured = core.measure_read_modes(path, CALIBRATION_BYTES, READ_CANDIDATES, CALIBRATION_ROUNDS)
    best, reason = preferred_read_mode(measured.results)
    # O_DIRECT is taken as "auto": it applies to a read whose destination and file
    # offset agree modulo 4096 (loads place their buffers so), else the page cache.
    mode = "auto" if best.mode == "direct" else best.mode
    chosen = ReadMode(mode, best.threads, best.request_bytes, best.gigabytes_per_second, reason)
    remember(key, vars(chosen))
    return chosen


def _remembered_mode(path: str, key: str) -> ReadMode | None:
    """The mode remembered for the device, its speed read again on `path` now: which mode
    reads fastest is the device's, while its speed drifts (a shared disk here went from
    1.5 to 2.2 GB/s between two days, and by 2x within minutes), so a cached figure would
    mislead the simulator."""
    entry = remembered(key)
    if entry is None:
        return None
    measured_on = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry["measured_at"]))
    reason = f"{entry['reason']}; chosen {measured_on}, cached"
    mode, threads, request_bytes = entry["mode"], entry["threads"], entry["request_bytes"]
    speed = core.measure_read_modes(path, CALIBRATION_BYTES, [(mode, threads, request_bytes)]).best
    return ReadMode(mode, threads, request_bytes, speed.gigabytes_per_second, reason)


def choose_read_mode(path: str, streamed_bytes: int, depth: int | None, budget_bytes: int | None = None) -> ReadMode:
    """How to read `path`, with its measured speed: the fastest median of buffered and O_DIRECT
    at 2, 4 and 8 threads (page cache dropped before each read), measured once per device
    (and remembered across processes, its speed read again: storage/read_mode_cache.py) when the plan streams
    enough to matter and the measurement's buffer takes at most a quarter of
    `budget_bytes` of RAM; else, or with an explicit `depth`, one quick
    measurement of the mode used, for the simulator."""
    fits = budget_bytes is None or CALIBRATION_BYTES <= budget_bytes // 4
    large = streamed_bytes >= 4 * CALIBRATION_BYTES and os.path.getsize(path) >= CALIBRATION_BYTES
    if depth is None and fits and large:
        key = device_key(path)
        if key not in _CHOSEN:
            _CHOSEN[key] = _remembered_mode(path, key) or _measured_mode(path, key)
        return _CHOSEN[key]
    threads = depth if depth is not None else 4
    reason = (
        "CompileConfig.io_queue_depth"
        if depth is not None
        else "too little streams per call to compare modes"
        if not large
        else "the RAM budget is too small to compare modes"
    )
    sample = min(os.path.getsize(path) // 4096 * 4096, QUICK_SAMPLE_BYTES)
    speed = None
    if sample:
        speed = core.measure_read_modes(path, sample, [("auto", threads, 1 << 20)]).best.gigabytes_per_second
    return ReadMode("auto", threads, 16 << 20, speed, reason)


def meta_tensors(path: str) -> tuple[core.SafetensorsHeader, dict[str, torch.Tensor]]:
    """The file's header, and one meta tensor (shape and dtype, no data) per tensor in it."""
    header = core.read_safetensors_header(path)
    tensors = {
        entry.name: torch.empty(entry.shape, dtype=SAFETENSORS_DTYPES[entry.dtype], device="meta")
        for entry in header.tensors
    }
    return header, tensors


def weights_file(
    path: str, header, entries: list[dict], program, record: dict[str, Any] | None, kept: frozenset[int] = frozenset()
) -> WeightsOnDisk:
    """Where each of `program`'s bound tensors lies in the weights file (via the manifest's
    weights table), with the file's chunk digests when integrity records are at hand;
    the slots `kept` stay the tensors bound in RAM."""
    by_key = {entry.name: entry for entry in header.tensors}
    recorded = {name: entry for entry in entries for name in entry["names"]}
    ranges = {}
    # A buffer the program writes stays the model's own tensor in RAM: a file holds its
    # value when it was written, not the one calls left in it.
    for bound in (b for b in program.bound if b.slot not in program.mutated_slots | kept):
        table = recorded[bound.names[0]]
        entry = by_key[table["key"]]
        ranges[bound.slot] = WeightRange(
            offset=header.data_offset + entry.begin,
            nbytes=entry.end - entry.begin,
            dtype=SAFETENSORS_DTYPES[entry.dtype],
            shape=tuple(entry.shape),
            crc32c=int(table.get("crc32c", -1)),
        )
    file = WeightFile(
        path=os.path.abspath(path),
        size=os.path.getsize(path),
        chunk_bytes=int(record["chunk_size"]) if record else 0,
        chunk_sha256=tuple(record["chunks"]) if record else (),
    )
    return WeightsOnDisk(files=(file,), ranges=ranges)


def verified_weights(weights: WeightsOnDisk) -> WeightsOnDisk:
    """Reads each file with chunk digests once, checking every chunk's digest (holding one
    small piece of it in memory at a time, so checking stays within any budget); returns
    `weights` with each such file's identity where nothing wrote it meanwhile, which lets
    a later load that finds the file so skip its range's CRC-32C pass."""
    files = []
    for file in weights.files:
        files.append(file)
        if not file.chunk_bytes:
            continue
        before = core.file_identity(file.path)
        found = chunk_digests(file.path, file.chunk_bytes)
        for index, expected in enumerate(file.chunk_sha256):
            got = next(found, None)
            if got is None or got[1] != expected:
                problem = "is truncated" if got is None else "fails its sha256 digest"
                raise DataCorruptionError(
                    f"{file.path}: chunk {index} (bytes from {index * file.chunk_bytes}) {problem}"
                )
        files[-1] = replace(file, verified_as=identity_if_intact(file.path, before))
    return replace(weights, files=tuple(files))


def stream_weights(
    runner: ProgramRunner,
    regions,
    weights: WeightsOnDisk,
    config,
    cpu_slots: int,
    verify: bool,
    budget: int,
    example: list | None = None,
    layout: Layout | None = None,
    hold_none: bool = False,
) -> PlaneProgram:
    """The streamed program of `runner`'s regions within `budget` bytes of RAM, its
    residents loaded (with `hold_none`, none: every weight on disk streams), its regions
    where `layout` puts them (default: the CPU); raises MemoryCapacityError (before
    anything runs) when no plan fits. With `example` (flat inputs), its predictions come
    from a profiling call (see streamed_profile.py) where one is quick enough."""
    names = [region.name for region in regions]
    # How to read is measured first: its reads in flight are the program's I/O queue depth.
    largest = max(weights.files, key=lambda file: file.size).path
    # Streamed per call: what the budget cannot hold, or, holding none, every weight on disk.
    streamed = weights.nbytes if hold_none else weights.nbytes - budget
    reads = choose_read_mode(largest, streamed, config.io_queue_depth, budget)
    # The simulator models the disk as one shared resource reading one load at a time at
    # its measured bandwidth (the program that runs keeps several in flight); regions at
    # their roofline (a measured GEMM rate and memory bandwidth).
    distances = [config.prefetch_distance] if config.prefetch_distance is not None else list(DISTANCES)
    roofline = [roofline_seconds(r, cost) for r, cost in zip(regions, region_costs(regions))]
    tier = choose_disk_tier(
        runner,
        names,
        weights,
        budget,
        cpu_slots,
        distances,
        roofline,
        ((reads.measured_gbps or 1.0) * 1e9, reads.threads, reads.request_bytes),
        allow_streaming=config.allow_disk_streaming,
        activation_budget=config.activation_budget_bytes,
        layout=layout,
        hold_none=hold_none,
    )
    chosen, simulated = tier.plan, tier.simulated
    if verify:
        weights = verified_weights(weights)
    io = core.IoEngine(
        threads=reads.threads, queue_depth=reads.threads, chunk_bytes=reads.request_bytes, mode=reads.mode
    )
    log.info("weights are read %s", reads.describe())
    if io.direct_fallback_reason:
        log.info("some reads go through the page cache: %s", io.direct_fallback_reason)
    spill_dir = spill_dir_for(chosen, config)

    def deeper(simulated) -> LoweredProgram:
        return with_io_depth(
            chosen, runner, weights, cpu_slots, reads.threads, simulated, config.activation_budget_bytes, layout
        )

    # Predicted at the roofline, or where a call is quick enough, as a profiling call ran.
    costs = ROOFLINE_COSTS
    if example is not None and layout is None and simulated.makespan_s <= PROFILE_LIMIT_S:
        stall = config.stall_timeout_s
        measured = profile_streamed(runner, deeper(simulated), weights, io, example, spill_dir, stall)
        speed = measured.read_bytes_per_s or (reads.measured_gbps or 1.0) * 1e9
        simulated = simulate_plan(chosen, measured.region_seconds, speed)  # every region on the CPU
        costs = PROFILED_COSTS
    machine = layout.machine if layout is not None else None
    window = reads.threads * reads.request_bytes
    return PlaneProgram(
        runner,
        deeper(simulated),
        weights,
        io,
        reads.describe(),
        spill_dir,
        costs,
        tier.reason,
        machine=machine,
        read_window_bytes=window,
    )


def weights_in_cache(program, config, disk_budget_bytes: int, kept: frozenset[int] = frozenset()) -> WeightsOnDisk:
    """Where `program`'s bound tensors lie in the weights cache, written there first unless
    a file of the same tensors is there already; the slots `kept` stay in RAM."""
    directory = cache_directory(config.spill_dir)
    cached = cache_weights(program.bound, directory, disk_budget_bytes)
    log.info("weights %s %s", "reused from" if cached.reused else "written to", cached.path)
    header = core.read_safetensors_header(cached.path)
    # Each load checks its tensor's CRC-32C, recorded as the file was written (a cache file
    # from before they were recorded: the SHA-256 of the whole chunks a load covers).
    checksums = cached.record.get("tensor_crc32c", {})
    entries = [
        {"key": b.names[0], "names": list(b.names), "crc32c": checksums.get(b.names[0], -1)} for b in program.bound
    ]
    return weights_file(cached.path, header, entries, program, cached.record, kept)
