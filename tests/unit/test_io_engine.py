"""The native I/O engine from Python: bytes, digests from hashlib, errors and a released GIL."""

from __future__ import annotations

import hashlib
import os
import threading

import numpy as np
import pytest
import torch

from tensortorrent import _core, errors

CHUNK = 64 << 10


@pytest.fixture
def data_file(tmp_path):
    data = os.urandom(5 * CHUNK + 1234)
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    return str(path), data


def chunk_digests(data: bytes, chunk: int) -> list[str]:
    return [hashlib.sha256(data[at : at + chunk]).hexdigest() for at in range(0, len(data), chunk)]


@pytest.mark.parametrize("mode", ["auto", "buffered"])
def test_read_into_numpy_and_torch_gives_the_files_bytes(data_file, mode):
    path, data = data_file
    engine = _core.IoEngine(threads=3, queue_depth=4, chunk_bytes=16 << 10, mode=mode)
    array = np.zeros(len(data) - 100, dtype=np.uint8)
    engine.read_into(path, 100, array)
    assert array.tobytes() == data[100:]
    tensor = torch.zeros(4096, dtype=torch.uint8)
    engine.read_into(path, 8192, tensor)
    assert bytes(tensor.numpy()) == data[8192 : 8192 + 4096]
    stats = engine.stats()
    assert stats.requests == 2 and stats.bytes_read == len(data) - 100 + 4096
    assert isinstance(engine.direct_fallback_reason, str)


def test_hashlib_digests_are_accepted_and_a_flipped_byte_is_rejected(data_file):
    path, data = data_file
    digests = chunk_digests(data, CHUNK)
    engine = _core.IoEngine(threads=2, queue_depth=2)
    out = np.zeros(len(data), dtype=np.uint8)
    engine.read_into(path, 0, out, chunk_digests=digests, chunk_bytes=CHUNK)
    assert engine.stats().chunks_verified == len(digests)

    flipped = bytearray(data)
    flipped[3 * CHUNK + 5] ^= 0xFF
    with open(path, "wb") as handle:
        handle.write(flipped)
    with pytest.raises(errors.DataCorruptionError, match=r"chunk 3 "):
        engine.read_into(path, 0, out, chunk_digests=digests, chunk_bytes=CHUNK)


def test_errors_map_to_the_python_classes(tmp_path, data_file):
    path, data = data_file
    engine = _core.IoEngine(threads=1, queue_depth=1)
    with pytest.raises(errors.NotFoundError):
        engine.read_into(str(tmp_path / "missing"), 0, np.zeros(4, dtype=np.uint8))
    with pytest.raises(errors.DataCorruptionError, match="file ends at byte"):
        engine.read_into(path, len(data) - 2, np.zeros(4, dtype=np.uint8))
    with pytest.raises(errors.ScheduleError):
        _core.IoEngine(threads=0)
    with pytest.raises(errors.ScheduleError):
        _core.IoEngine(mode="fast")
    with pytest.raises(errors.ScheduleError):
        engine.read_into(path, 0, np.zeros(4, dtype=np.uint8), chunk_digests=["not hex"], chunk_bytes=CHUNK)
    read_only = np.zeros(4, dtype=np.uint8)
    read_only.flags.writeable = False
    with pytest.raises(TypeError):
        engine.read_into(path, 0, read_only)


def test_a_python_thread_keeps_running_while_a_read_runs(data_file):
    path, data = data_file
    # 20 pieces, each read after a 10 ms sleep: about 0.2 s with the GIL released.
    engine = _core.IoEngine(threads=1, queue_depth=1, chunk_bytes=16 << 10, mode="buffered", test_delay_s=0.01)
    counter = 0
    stop = threading.Event()

    def spin():
        nonlocal counter
        while not stop.is_set():
            counter += 1

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        out = np.zeros(20 * (16 << 10), dtype=np.uint8)
        before = counter
        engine.read_into(path, 0, out)
        during = counter - before
    finally:
        stop.set()
        spinner.join()
    assert out.tobytes() == data[: out.size]
    assert during > 1000, f"the counter advanced only {during} times: was the GIL held?"


def test_sha256_hex_matches_hashlib():
    for message in [b"", b"abc", os.urandom(100_000)]:
        assert _core.sha256_hex(message) == hashlib.sha256(message).hexdigest()


def test_measure_read_modes_reports_each_candidate(data_file):
    path, _ = data_file
    measurement = _core.measure_read_modes(path, 1 << 20, [("buffered", 1, 64 << 10), ("direct", 2, 64 << 10)])
    assert [r.mode for r in measurement.results] == ["buffered", "direct"]
    assert measurement.results[0].measured and measurement.results[0].gigabytes_per_second > 0
    assert measurement.results[1].measured or measurement.results[1].skipped_reason
    assert measurement.best.measured and measurement.bytes == (5 * CHUNK + 1234) // 4096 * 4096


def test_crc32c_of_a_tensor_matches_the_standard_check_value():
    check = torch.frombuffer(bytearray(b"123456789"), dtype=torch.uint8)
    assert _core.crc32c(check) == 0xE3069283
