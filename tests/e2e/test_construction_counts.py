"""What compiling costs in constructions (issue 42): a model's Program is built once per
placement simulated and once for the program that runs, never lowered again by the
module, and its ProgramRunner (an fx GraphModule per region) once."""

from __future__ import annotations

import torch
from torch import nn

import tensortorrent as tt
from conftest import eager_outputs
from tensortorrent import core
from tensortorrent.runtime import program_runner


def counted(monkeypatch) -> dict[str, int]:
    """How many times core.Program and ProgramRunner are built, and programs simulated, from now on."""
    built = {"Program": 0, "ProgramRunner": 0, "simulated": 0}
    native_program, runner_init, simulate = core.Program, program_runner.ProgramRunner.__init__, core.simulate_program

    def program(*args, **kwargs):
        built["Program"] += 1
        return native_program(*args, **kwargs)

    def runner(self, *args, **kwargs):
        built["ProgramRunner"] += 1
        runner_init(self, *args, **kwargs)

    def simulated(*args, **kwargs):
        built["simulated"] += 1
        return simulate(*args, **kwargs)

    monkeypatch.setattr(core, "Program", program)
    monkeypatch.setattr(core, "simulate_program", simulated)
    monkeypatch.setattr(program_runner.ProgramRunner, "__init__", runner)
    return built


def test_an_in_memory_cpu_model_builds_its_program_twice_and_its_runner_once(monkeypatch):
    built = counted(monkeypatch)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(128, 128), nn.ReLU()) for _ in range(4)]).eval()
    x = torch.randn(8, 128)
    compiled = tt.compile(model, (x,), tt.CompileConfig(max_region_nodes=2), devices="cpu")
    assert compiled.region_count == 4 and not compiled.uses_direct_path
    # The CPU alone: one placement simulated, then rebuilt with its predictions to run.
    assert built == {"Program": 2, "ProgramRunner": 1, "simulated": 1}
    assert compiled._plane.plan is compiled._plan.placement.chosen.program
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))
    assert built == {"Program": 2, "ProgramRunner": 1, "simulated": 1}, "a call builds neither"


def test_a_plan_on_devices_builds_a_program_per_placement_simulated_and_runs_the_winners(monkeypatch):
    built = counted(monkeypatch)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(128, 128), nn.ReLU()) for _ in range(4)]).eval()
    x = torch.randn(8, 128)
    fast = tt.VirtualDevice("fast", memory_bytes=1 << 30, flops=1e13, link_bandwidth=1e10)
    config = tt.CompileConfig(max_region_nodes=2)
    compiled = tt.compile(model, (x,), config, devices=["cpu", "fast"], machine=[fast])
    assert compiled.region_count == 4 and built["simulated"] > 1
    # The search simulates many placements, each lowered once; the winner is rebuilt with
    # its predictions, and that very program runs.
    assert built["Program"] == built["simulated"] + 1 and built["ProgramRunner"] == 1
    assert compiled._plane.plan is compiled._plan.placement.chosen.program
    before = dict(built)
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))
    assert built == before, "a call builds nothing"
