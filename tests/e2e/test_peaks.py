"""For every plan the data plane runs in this suite's parity models, and for plans on virtual
devices, the measured peak of each tier during a call equals the simulated peak of the same
program replaying the call (each instruction started and timed as it ran), in bytes."""

from __future__ import annotations

import pytest
import torch
from unit.test_artifact import SPLIT, cases

import tensortorrent as tt
from tensortorrent import _core


def simulated_peaks(compiled: tt.CompiledModule, program: _core.Program | None = None) -> list[int]:
    """Per tier, the peak the simulator finds for the program replaying the last call: each
    instruction started no sooner than it did and lasting as long (frees take none). The
    threads' own delays (a copy completing from its link's thread, a kernel waiting for the
    GIL) are the call's, not the model's, so the replay starts each one as measured.
    `program`: the one the call ran (default: the inference program's)."""
    program = program or compiled._plane.plan.program
    records = {r.id: r for r in compiled.last_report.records}
    instructions = program.schedule.instructions
    free = _core.InstructionKind.Free
    seconds = [0.0 if i.kind == free else (records[i.id].end_us - records[i.id].start_us) / 1e6 for i in instructions]
    starts = [records[i.id].start_us / 1e6 for i in instructions]
    return list(_core.simulate_program(program, seconds, earliest_start_s=starts).peak_bytes)


def simulated_peak(compiled: tt.CompiledModule) -> int:
    return simulated_peaks(compiled)[0]


@pytest.mark.parametrize("case", range(len(cases())), ids=[c[0] for c in cases()])
def test_measured_peak_equals_simulated_peak(case):
    _, model, args, kwargs = cases()[case]
    compiled = tt.compile(model, example_inputs=args, example_kwargs=kwargs, config=SPLIT)
    if compiled.uses_direct_path:
        pytest.skip("one region: the direct path, not the data plane")
    compiled(*args, **(kwargs or {}))
    assert compiled.last_peak_bytes["ram"] == simulated_peak(compiled)
    assert compiled.last_peak_bytes["ram"] <= compiled._plane.plan.program.memory_plan.arena_bytes[0]


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "vit", "resnet"])
def test_measured_peak_equals_simulated_peak_on_transformers_architectures(name):
    pytest.importorskip("transformers")
    from e2e import test_parity_transformers as zoo

    torch.manual_seed(0)
    model = getattr(zoo, name)()
    args, kwargs = zoo.example_inputs(name)
    compiled = tt.compile(model, example_inputs=args, example_kwargs=kwargs)
    assert not compiled.uses_direct_path
    for _ in range(2):
        compiled(*args, **(kwargs or {}))
        assert compiled.last_peak_bytes["ram"] == simulated_peak(compiled)


def virtual_plans():
    from e2e.test_virtual_devices import BATCH, WIDTH, Stack, fast_small, slow_large

    from conftest import ProbeChain

    torch.manual_seed(0)
    stack, x = Stack().eval(), torch.randn(BATCH, WIDTH)
    quick = tt.VirtualDevice("quick", memory_bytes=int(2.5 * (64 * 64 + 64) * 4), flops=1e12, link_bandwidth=1e10)
    return {
        "streams-to-one-device": (stack, x, ["fast"], [fast_small()], tt.CompileConfig()),
        "two-devices": (stack, x, ["fast", "slow"], [fast_small(), slow_large()], tt.CompileConfig()),
        "cpu-and-device": (stack, x, ["cpu", "fast"], [fast_small()], tt.CompileConfig(objective="throughput")),
        "one-op-regions": (
            ProbeChain(stages=4, width=64).eval(),
            torch.randn(2, 64),
            ["quick"],
            [quick],
            tt.CompileConfig(max_region_nodes=1),
        ),
    }


@pytest.mark.parametrize("name", list(virtual_plans()))
def test_measured_peaks_equal_simulated_peaks_on_virtual_devices(name):
    model, x, devices, machine, config = virtual_plans()[name]
    compiled = tt.compile(model, (x,), config=config, devices=devices, machine=machine)
    arena = compiled._plane.plan.program.memory_plan.arena_bytes
    for _ in range(2):
        compiled(x)
        peaks = compiled.last_peak_bytes
        assert list(peaks) == ["ram", *(d for d in devices if d != "cpu")]
        assert list(peaks.values()) == simulated_peaks(compiled)
        assert all(peak <= bound for peak, bound in zip(peaks.values(), arena))
