"""The program IR, the memory ledger and host arenas, seen from Python through the bindings."""

from __future__ import annotations

import gc

import pytest
import torch

import tensortorrent as tt
from tensortorrent import _core

K = _core.InstructionKind
LIFE = _core.BufferLifetime


def streamed_layer(ram_bytes: int = 1 << 20):
    """weights.bin[8192:12288] -Load-> w; compute(x, w) -> y; free w; y is returned."""
    tiers = [_core.Tier("ram", _core.TierKind.Host, ram_bytes), _core.Tier("disk", _core.TierKind.Disk)]
    queues = [_core.Queue("cpu", _core.QueueKind.Compute, 2), _core.Queue("io", _core.QueueKind.Io, 4)]
    files = [_core.FileSpec("weights.bin", 1 << 16)]
    buffers = [
        _core.Buffer(0, 1, 4096, lifetime=LIFE.Resident, file=0, file_offset=8192, label="w on disk"),
        _core.Buffer(1, 0, 4096, dtype="float32", shape=[32, 32], label="w"),
        _core.Buffer(2, 0, 256, lifetime=LIFE.Input, label="x"),
        _core.Buffer(3, 0, 256, label="y"),
    ]
    instructions = [
        _core.Instruction(0, K.Load, queue=1, reads=[0], writes=[1], label="load w"),
        _core.Instruction(1, K.Compute, region=0, queue=0, reads=[2, 1], writes=[3], deps=[0], label="layer"),
        _core.Instruction(2, K.Free, queue=0, reads=[1], deps=[1], label="free w"),
    ]
    return tiers, queues, files, buffers, instructions, [3]


def test_a_program_is_validated_and_planned():
    program = _core.Program(*streamed_layer())
    plan = program.memory_plan
    assert plan.offsets == [-1, 0, -1, 4096]
    assert plan.arena_bytes == [4096 + 256, 0] and plan.peak_bytes == [4096 + 256, 0]
    assert [i.label for i in program.schedule.instructions] == ["load w", "layer", "free w"]
    assert program.buffers[1].shape == [32, 32] and program.buffers[1].dtype == "float32"


def test_invalid_programs_name_the_instruction_and_the_buffer():
    parts = list(streamed_layer())
    parts[4][1].deps = []
    with pytest.raises(tt.ScheduleError, match=r"compute 1 \('layer'\) may read buffer 1 \('w'\) before load 0"):
        _core.Program(*parts)
    with pytest.raises(tt.MemoryCapacityError, match="tier 'ram' needs 4352 bytes"):
        _core.Program(*streamed_layer(ram_bytes=4000))


def test_the_ledger_keeps_budgets_and_holds_nothing_after_a_refusal():
    ledger = _core.MemoryLedger([_core.Tier("ram", _core.TierKind.Host, 1000)])
    ledger.reserve(0, 700, "weights")
    with pytest.raises(tt.MemoryCapacityError, match="tier 'ram': activations needs 400 bytes but 700 of its 1000"):
        ledger.reserve(0, 400, "activations")
    assert ledger.held(0) == 700 and ledger.peak(0) == 700
    assert not ledger.reserve_all([400], 0.01, "a call")
    ledger.release(0, 700)
    assert ledger.reserve_all([400], 0.0, "a call") and ledger.held(0) == 400


def test_arena_views_are_zero_copy_tensors_that_keep_the_arena_alive():
    pool = _core.HostArenaPool(1 << 16)
    arena = pool.acquire()
    assert arena.address % 4096 == 0
    weights = arena.view(4096, 1024).view(torch.float32)
    weights.fill_(2.0)
    same = arena.view(4096, 1024).view(torch.float32)
    assert same.data_ptr() == weights.data_ptr() == arena.address + 4096
    assert torch.equal(same, torch.full((256,), 2.0))
    del arena, pool, same
    gc.collect()
    assert torch.equal(weights, torch.full((256,), 2.0))  # the view still owns its bytes
    with pytest.raises(tt.ScheduleError, match="lies outside its"):
        _core.HostArenaPool(64).acquire().view(0, 65)
