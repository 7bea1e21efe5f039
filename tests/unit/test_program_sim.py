"""simulate_program through the bindings: the Program the executor runs, simulated; times and peaks by hand."""

from __future__ import annotations

import math

import pytest

import tensortorrent as tt
from tensortorrent import _core

K = _core.InstructionKind
LIFE = _core.BufferLifetime


def two_streamed_layers() -> _core.Program:
    """Loads w0 and w1 from weights.bin on a depth-1 I/O queue; layer k computes h_k from h_(k-1) and w_k.

    Positions: 0 load w0, 1 load w1, 2 layer0, 3 free w0, 4 layer1, 5 free w1 and h0.
    """
    tiers = [_core.Tier("ram", _core.TierKind.Host), _core.Tier("disk", _core.TierKind.Disk)]
    queues = [_core.Queue("cpu", _core.QueueKind.Compute, 2), _core.Queue("io", _core.QueueKind.Io, 1)]
    files = [_core.FileSpec("weights.bin", 1 << 16)]
    buffers = [
        _core.Buffer(0, 1, 4096, lifetime=LIFE.Resident, file=0, file_offset=0, label="w0 on disk"),
        _core.Buffer(1, 1, 4096, lifetime=LIFE.Resident, file=0, file_offset=4096, label="w1 on disk"),
        _core.Buffer(2, 0, 4096, label="w0"),
        _core.Buffer(3, 0, 4096, label="w1"),
        _core.Buffer(4, 0, 256, lifetime=LIFE.Input, label="x"),
        _core.Buffer(5, 0, 256, label="h0"),
        _core.Buffer(6, 0, 256, label="h1"),
    ]
    instructions = [
        _core.Instruction(0, K.Load, queue=1, reads=[0], writes=[2], label="load w0"),
        _core.Instruction(1, K.Load, queue=1, reads=[1], writes=[3], label="load w1"),
        _core.Instruction(2, K.Compute, region=0, queue=0, reads=[4, 2], writes=[5], deps=[0], label="layer0"),
        _core.Instruction(3, K.Free, queue=0, reads=[2], deps=[2], label="free w0"),
        _core.Instruction(4, K.Compute, region=1, queue=0, reads=[5, 3], writes=[6], deps=[1, 2], label="layer1"),
        _core.Instruction(5, K.Free, queue=0, reads=[3, 5], deps=[4], label="free w1 h0"),
    ]
    return _core.Program(tiers, queues, files, buffers, instructions, [6])


def test_a_program_is_simulated_with_loads_derived_from_the_queue_bandwidth():
    program = two_streamed_layers()
    # Loads: 0.5 s latency + 4096 B at 4096 B/s; computes 2 s; frees take no time.
    result = _core.simulate_program(
        program, [-1, -1, 2, 0, 2, 0], queue_bytes_per_s=[0, 4096], queue_latency_s=[0, 0.5]
    )
    # The queue runs one load at a time; layer1 waits for layer0 and for w0's free (h1 reuses w0's bytes).
    assert result.start_s == [0, 1.5, 1.5, 3.5, 3.5, 5.5]
    assert result.end_s == [1.5, 3.0, 3.5, 3.5, 5.5, 5.5]
    assert result.makespan_s == 5.5
    assert result.critical_path == [0, 2, 4]
    assert result.bytes_moved == [0, 2 * 4096] and result.busy_s == [4.0, 3.0]
    # At 1.5 w0, w1 and h0 are live; at 3.5 w0 is freed before h1 is written.
    assert result.peak_bytes == [2 * 4096 + 256, 0]
    assert result.arena_bytes == list(program.memory_plan.arena_bytes) == [2 * 4096 + 256, 0]
    assert "makespan_s=5.5" in repr(result)


def test_the_same_program_gives_the_same_result_and_bad_costs_name_the_instruction():
    program = two_streamed_layers()
    seconds = [1.0, 1.0, 2.0, 0.0, 2.0, 0.0]
    first, second = _core.simulate_program(program, seconds), _core.simulate_program(program, seconds)
    assert first.start_s == second.start_s and first.peak_bytes == second.peak_bytes
    with pytest.raises(tt.ScheduleError, match=r"expected one per instruction \(6\)"):
        _core.simulate_program(program, seconds[:5])
    with pytest.raises(tt.ScheduleError, match=r"compute 2 \('layer0'\) has seconds nan"):
        _core.simulate_program(program, [1.0, 1.0, math.nan, 0.0, 2.0, 0.0])
    with pytest.raises(tt.ScheduleError, match=r"load 0 \('load w0'\) has seconds -1"):
        _core.simulate_program(program, [-1.0, 1.0, 2.0, 0.0, 2.0, 0.0])
    assert _core.transfer_seconds(1000, 500.0, 0.5) == 2.5
