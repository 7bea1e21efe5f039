"""For every plan the data plane runs in this suite's parity models, the measured RAM peak of
a call equals the simulated peak of the same program, in bytes."""

from __future__ import annotations

import pytest
import torch
from unit.test_artifact import SPLIT, cases

import tensortorrent as tt
from tensortorrent import _core


def simulated_peak(compiled: tt.CompiledModule) -> int:
    """The RAM peak the simulator predicts for the program, with measured region times."""
    program = compiled._plane.plan.program
    measured = {r.id: (r.end_us - r.start_us) / 1e6 for r in compiled.last_report.records}
    seconds = [
        measured[i.id] if i.kind == _core.InstructionKind.Compute else 0.0 for i in program.schedule.instructions
    ]
    return _core.simulate_program(program, seconds).peak_bytes[0]


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
