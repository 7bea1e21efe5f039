"""How a weights file is read: measured on its device once per process, or as configured."""

from __future__ import annotations

import json
import os
import time

from tensortorrent.runtime import streamed_weights
from tensortorrent.storage import read_mode_cache


def test_the_read_mode_is_measured_once_per_device_and_an_explicit_depth_wins(tmp_path, monkeypatch):
    monkeypatch.setattr(streamed_weights, "CALIBRATION_BYTES", 4 << 20)
    monkeypatch.setattr(streamed_weights, "_CHOSEN", {})
    monkeypatch.setenv("TT_READ_MODE_CACHE", "0")
    path = tmp_path / "weights.bin"
    path.write_bytes(os.urandom(4 << 20))
    chosen = streamed_weights.choose_read_mode(str(path), streamed_bytes=1 << 30, depth=None)
    assert chosen.mode in ("buffered", "auto") and chosen.threads in (2, 4, 8)
    assert chosen.measured_gbps > 0 and "GB/s measured" in chosen.describe()
    assert streamed_weights.choose_read_mode(str(path), 1 << 30, None) is chosen  # not measured again
    fixed = streamed_weights.choose_read_mode(str(path), 1 << 30, depth=3)
    assert fixed.threads == 3 and fixed.mode == "auto" and fixed.measured_gbps > 0  # measured for the simulator
    small = streamed_weights.choose_read_mode(str(path), streamed_bytes=1 << 20, depth=None)
    assert small.threads == 4 and "too little" in small.reason


def test_a_measured_read_mode_is_remembered_for_the_device_across_processes(tmp_path, monkeypatch):
    monkeypatch.setattr(streamed_weights, "CALIBRATION_BYTES", 4 << 20)
    monkeypatch.setattr(streamed_weights, "_CHOSEN", {})
    monkeypatch.setenv("TT_SPILL_DIR", str(tmp_path / "cache"))
    path = tmp_path / "weights.bin"
    path.write_bytes(os.urandom(4 << 20))
    measured = streamed_weights.choose_read_mode(str(path), streamed_bytes=1 << 30, depth=None)
    entries = read_mode_cache.cached_read_modes()
    assert list(entries) == [read_mode_cache.device_key(str(path))]
    monkeypatch.setattr(streamed_weights, "_CHOSEN", {})  # a new process
    timed = []  # the candidates each measurement compared
    measure = streamed_weights.core.measure_read_modes
    monkeypatch.setattr(
        streamed_weights.core,
        "measure_read_modes",
        lambda path, size, candidates, *rounds: timed.append(candidates) or measure(path, size, candidates, *rounds),
    )
    cached = streamed_weights.choose_read_mode(str(path), 1 << 30, None)
    assert (cached.mode, cached.threads, cached.request_bytes) == (
        measured.mode,
        measured.threads,
        measured.request_bytes,
    )
    assert cached.reason.startswith(measured.reason) and "cached" in cached.reason
    # Only the remembered mode is read again, for today's speed: the disk's drifts.
    assert timed == [[(measured.mode, measured.threads, measured.request_bytes)]] and cached.measured_gbps > 0
    key = read_mode_cache.device_key(str(path))
    stale = dict(entries[key], measured_at=time.time() - read_mode_cache.MAX_AGE_S - 1)
    (tmp_path / "cache" / read_mode_cache.CACHE_FILE).write_text(json.dumps({key: stale}))
    monkeypatch.setattr(streamed_weights, "_CHOSEN", {})
    assert "cached" not in streamed_weights.choose_read_mode(str(path), 1 << 30, None).reason, "a stale entry"
    measured_otherwise = dict(entries[key], method=read_mode_cache.METHOD - 1)
    (tmp_path / "cache" / read_mode_cache.CACHE_FILE).write_text(json.dumps({key: measured_otherwise}))
    monkeypatch.setattr(streamed_weights, "_CHOSEN", {})
    assert "cached" not in streamed_weights.choose_read_mode(str(path), 1 << 30, None).reason, "another method"


class Measured:
    """A stand-in for the core's ReadModeResult: a candidate and its median GB/s."""

    def __init__(self, mode: str, threads: int, gbps: float, measured: bool = True):
        self.mode, self.threads, self.gigabytes_per_second, self.measured = mode, threads, gbps, measured


def test_direct_reads_are_preferred_unless_buffered_ones_are_clearly_faster():
    close = [Measured("buffered", 8, 3.0), Measured("direct", 4, 2.4), Measured("direct", 8, 2.3)]
    best, reason = streamed_weights.preferred_read_mode(close)
    assert (best.mode, best.threads) == ("direct", 8) and "within 25% of the fastest" in reason
    clearly = [Measured("buffered", 8, 3.0), Measured("direct", 4, 2.2)]
    assert streamed_weights.preferred_read_mode(clearly)[0].mode == "buffered"
    deeper = [Measured("direct", 2, 1.64), Measured("direct", 4, 1.55), Measured("direct", 8, 1.30)]
    best, reason = streamed_weights.preferred_read_mode(deeper)
    assert best.threads == 4 and "4 threads, within 10% of 2" in reason
    refused = [Measured("buffered", 2, 1.0), Measured("direct", 2, 0.0, measured=False)]
    best, reason = streamed_weights.preferred_read_mode(refused)
    assert best.mode == "buffered" and "fastest of 1 measured" in reason


def test_no_read_mode_is_compared_with_a_buffer_larger_than_a_quarter_of_the_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(streamed_weights, "CALIBRATION_BYTES", 4 << 20)
    monkeypatch.setattr(streamed_weights, "_CHOSEN", {})
    path = tmp_path / "weights.bin"
    path.write_bytes(os.urandom(4 << 20))
    chosen = streamed_weights.choose_read_mode(str(path), streamed_bytes=1 << 30, depth=None, budget_bytes=8 << 20)
    assert chosen.threads == 4 and "budget is too small" in chosen.reason
    assert streamed_weights._CHOSEN == {}


def test_damaged_cache_entries_are_left_out_to_be_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("TT_SPILL_DIR", str(tmp_path))
    good = dict(mode="auto", threads=4, request_bytes=16 << 20, measured_gbps=1.5, reason="r", measured_at=1.0e9)
    damaged = {
        "1:0": "not an entry",
        "1:1": dict(good, threads="8"),
        "1:2": dict(good, measured_at="yesterday"),
        "1:3": {k: v for k, v in good.items() if k != "mode"},
        "1:4": dict(good, request_bytes=-1),
    }
    path = tmp_path / read_mode_cache.CACHE_FILE
    path.write_text(json.dumps({"8:0": good, **damaged}))
    assert list(read_mode_cache.cached_read_modes()) == ["8:0"]
    path.write_text("[" * 100_000)  # nested past the JSON parser's recursion limit
    assert read_mode_cache.cached_read_modes() == {}
