"""What every benchmark here shares: the machine record, interleaved timing, summaries and results files."""

from __future__ import annotations

import gc
import json
import math
import mmap
import os
import platform
import random
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import torch

import tensortorrent as tt
from tensortorrent.backends.cpu import cpu_model
from tensortorrent.files import drop_page_cache as evict
from tensortorrent.files import write_text_atomically

ROOT = Path(__file__).resolve().parent.parent
ROUND_ORDER_SEED = 0  # compare()'s random order of the systems in each round
RESULTS_DIR = ROOT / "bench" / "results"


def drop_page_cache(paths, mappings=()) -> None:
    """Evicts the files' pages before a cold read: first every dirty page on the machine
    is written back (a checkpoint or an offload folder written just before would
    otherwise be flushed during the timed reads, halving them), then this process's
    mappings of the files (mmap.mmap objects) are dropped, then their page cache."""
    os.sync()
    for mapping in mappings:
        mapping.madvise(mmap.MADV_DONTNEED)
    for path in paths:
        evict(path)


def summarize(samples: list[float]) -> dict:
    return {
        "median_us": statistics.median(samples),
        "min_us": min(samples),
        "max_us": max(samples),
        "samples_us": samples,
    }


@dataclass(frozen=True)
class Settings:
    runs: int  # timed samples per system
    sample_ns: int  # wall time one sample's batch of calls aims at
    warmup_ns: int  # least time spent warming each system up


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    """Mean microseconds per call over `calls` back-to-back calls."""
    gc.disable()  # a collection inside a sample would be charged to whichever system ran it
    try:
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter_ns() - start
    finally:
        gc.enable()
    return elapsed / calls / 1e3


def warm_up_and_size(fn: Callable[[], object], settings: Settings) -> int:
    """Warms `fn` up, then returns how many calls make one sample of about sample_ns."""
    calls, start = 0, time.perf_counter_ns()
    while calls < 3 or time.perf_counter_ns() - start < settings.warmup_ns:
        fn()
        calls += 1
    one_call_us = min(per_call_us(fn, 1) for _ in range(3))
    return max(1, round(settings.sample_ns / 1e3 / one_call_us))


def compare(
    systems: dict[str, Callable[[], object]], settings: Settings, errors: dict[str, Exception] | None = None
) -> dict[str, dict]:
    """Times the systems interleaved, one sample of each per round, so drift in the machine
    hits all alike. Each round runs them in a new random order (seeded: a rerun repeats
    it), so no system always runs right after the same other one, whose threads or
    evicted caches it would inherit, nor always first or last. (Rotating a fixed order
    would keep every system's predecessor.) Sample i of every system comes from round i
    (see paired_ratio).

    Without `errors` an exception propagates. With it, a system that raises is dropped from
    the timing and its exception kept there under its name, so one failing baseline does not
    cost the others their figures."""
    batch: dict[str, int] = {}
    for name, fn in systems.items():
        try:
            batch[name] = warm_up_and_size(fn, settings)
        except Exception as error:
            if errors is None:
                raise
            errors[name] = error
    samples: dict[str, list[float]] = {name: [] for name in batch}
    names, order = list(batch), random.Random(ROUND_ORDER_SEED)
    for _ in range(settings.runs):
        for name in [n for n in order.sample(names, len(names)) if n in batch]:
            try:
                samples[name].append(per_call_us(systems[name], batch[name]))
            except Exception as error:
                if errors is None:
                    raise
                errors[name] = error
                del batch[name]
    return {name: {**summarize(samples[name]), "calls_per_sample": batch[name]} for name in batch}


def paired_ratio(samples: list[float], reference: list[float], confidence: float = 0.95) -> dict:
    """The median over rounds of a system's sample over the reference's sample of the same
    round, and a `confidence` interval of that median (order statistics of the ratios: no
    assumption about their distribution). Pairing by round cancels the machine's drift
    that hits both, so the interval is narrower than the medians' spreads suggest."""
    ratios = sorted(s / r for s, r in zip(samples, reference, strict=True))
    n = len(ratios)
    # The widest rank j whose interval [ratios(j), ratios(n+1-j)] misses the median with
    # probability at most 1 - confidence: P(Binomial(n, 1/2) <= j - 1) <= (1 - confidence) / 2.
    tail, below, j = (1 - confidence) / 2, 0.0, 0
    while below + math.comb(n, j) / 2**n <= tail:
        below += math.comb(n, j) / 2**n
        j += 1
    j = max(j, 1)
    return {"median": statistics.median(ratios), "low": ratios[j - 1], "high": ratios[n - j], "confidence": confidence}


def busy_cpu_s() -> tuple[float, float]:
    """(CPU seconds every process has used since boot, CPU seconds this process has used)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(fields) - fields[3] - fields[4]  # all but idle and iowait
    own = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), own.user + own.system


def machine() -> dict:
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    mem_kib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:"))
    return {
        "cpu_model": cpu_model(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "ram_gib": round(mem_kib / 2**20, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "tensortorrent": tt.__version__,
        "git_commit": git("rev-parse", "HEAD"),
        # Results then may not match the commit; earlier results files do not count.
        "git_dirty": bool(git("status", "--porcelain", "--", ".", ":!bench/results")),
    }


def git(*args: str) -> str | None:
    """Output of a git command in the repo, or None where git or the repo is missing."""
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def write_json(data: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps(data, indent=2) + "\n")


def spread(t: dict) -> str:
    return f"{t['median_us']:.1f} ({t['min_us']:.1f}-{t['max_us']:.1f})"


def write_results(name: str, results: dict, started: datetime, out: Path | None) -> list[Path]:
    """Writes results as bench/results/NAME-<UTC time>.json and NAME-latest.json, or to `out` only."""
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    paths = [out] if out else [RESULTS_DIR / f"{name}-{stamp}.json", RESULTS_DIR / f"{name}-latest.json"]
    for path in paths:
        write_json(results, path)
    return paths
