"""Spills and reloads on the native data plane, seen from Python: the bytes come back from the
spill file, nothing is left in the spill directory, a full disk fails the run and the next run
succeeds, and a program that spills needs a spill directory."""

from __future__ import annotations

import os

import pytest
import torch

from tensortorrent import _core, errors

K = _core.InstructionKind


def spilled_round_trip() -> _core.Program:
    """fill h; spill h; scribble over h; free h; reload it into back; check back; free the rest."""
    tiers = [_core.Tier("ram", _core.TierKind.Host), _core.Tier("disk", _core.TierKind.Disk, 1 << 20)]
    queues = [_core.Queue("cpu", _core.QueueKind.Compute, 2), _core.Queue("io", _core.QueueKind.Io, 4)]
    buffers = [
        _core.Buffer(0, 0, 4096, label="h"),
        _core.Buffer(1, 1, 4096, label="spilled h"),
        _core.Buffer(2, 0, 4096, label="back"),
    ]
    instructions = [
        _core.Instruction(0, K.Compute, region=0, queue=0, writes=[0], label="fill"),
        _core.Instruction(1, K.Spill, queue=1, reads=[0], writes=[1], deps=[0], label="spill h"),
        _core.Instruction(2, K.Compute, region=1, queue=0, reads=[0], deps=[1], label="scribble"),
        _core.Instruction(3, K.Free, queue=0, reads=[0], deps=[2], label="free h"),
        _core.Instruction(4, K.Reload, queue=1, reads=[1], writes=[2], deps=[3], label="reload h"),
        _core.Instruction(5, K.Free, queue=0, reads=[1], deps=[4], label="free spilled h"),
        _core.Instruction(6, K.Compute, region=2, queue=0, reads=[2], deps=[4], label="check"),
        _core.Instruction(7, K.Free, queue=0, reads=[2], deps=[6], label="free back"),
    ]
    return _core.Program(tiers, queues, [], buffers, instructions, [])


def round_trip(plane: _core.DataPlane, seed: int) -> bool:
    """Runs one call; True when the reloaded bytes are the spilled ones."""
    expected = torch.randint(0, 256, (4096,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    memory = plane.begin_call(5.0)
    seen = {}

    def compute(instruction_id: int) -> None:
        if instruction_id == 0:
            plane.view(memory, 0).copy_(expected)
        elif instruction_id == 2:
            plane.view(memory, 0).fill_(0xEE)  # only the spill file still holds the bytes
        elif instruction_id == 6:
            seen["back"] = plane.view(memory, 2).clone()

    try:
        plane.run(memory, compute)
    finally:
        plane.end_call(memory)
    return torch.equal(seen["back"], expected)


def test_a_spilled_buffer_comes_back_and_nothing_is_left_behind(tmp_path):
    io = _core.IoEngine()
    plane = _core.DataPlane(spilled_round_trip(), io, 2, spill_dir=str(tmp_path))
    assert round_trip(plane, 1) and round_trip(plane, 2)
    assert plane.ledger_peak(1) == 4096 and plane.held(1) == 0
    assert io.stats().bytes_written == 2 * 4096
    assert os.listdir(tmp_path) == []
    del plane
    assert os.listdir(tmp_path) == []


def test_a_full_disk_fails_the_run_naming_the_spill_file_and_the_next_run_succeeds(tmp_path):
    io = _core.IoEngine(test_write_fault="enospc", test_write_fault_at=1)
    plane = _core.DataPlane(spilled_round_trip(), io, 2, spill_dir=str(tmp_path))
    with pytest.raises(errors.StorageIOError, match=f"spill file in '{tmp_path}'.*No space left on device"):
        round_trip(plane, 3)
    assert plane.held(0) == 0 and plane.held(1) == 0
    assert round_trip(plane, 4)


def test_a_program_that_spills_needs_a_spill_directory(tmp_path):
    with pytest.raises(errors.ScheduleError, match="disk tier 'disk', but was given no spill directory"):
        _core.DataPlane(spilled_round_trip(), _core.IoEngine(), 1)
    with pytest.raises(errors.NotFoundError, match="missing"):
        _core.DataPlane(spilled_round_trip(), _core.IoEngine(), 1, spill_dir=str(tmp_path / "missing"))
    with pytest.raises(TypeError):
        _core.DataPlane(spilled_round_trip(), _core.IoEngine(), 1, str(tmp_path))  # spill_dir is keyword-only
    with pytest.raises(errors.ScheduleError, match="test_write_fault"):
        _core.IoEngine(test_write_fault="slow")
