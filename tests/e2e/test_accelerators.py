"""Plans on real accelerators: a device a backend finds (CUDA, XPU, or here a third party's,
registered through an entry point by tests/plugins/good) with its link measured through
the backend's queues and each region's time measured on it, no declared times, its
copies on its own queues, and its memory budget held."""

from __future__ import annotations

import pytest
import torch
from e2e.test_peaks import simulated_peaks
from e2e.test_training import parameter_copies, train_side_by_side
from e2e.test_virtual_devices import BATCH, LAYER_BYTES, WIDTH, Stack
from unit.test_partition import Cache

import tensortorrent as tt
from conftest import assert_parity
from tensortorrent import core


@pytest.fixture
def example_device(plugins_from):
    plugins_from("good")  # the "example" backend: one device, example:0, in host memory
    return "example:0"


def test_a_backends_device_runs_a_plan_measured_on_it(example_device):
    torch.manual_seed(0)
    model, x = Stack(layers=4).eval(), torch.randn(BATCH, WIDTH)
    compiled = assert_parity(model, (x,), devices=[example_device])
    assert compiled.region_devices == [example_device] * 4
    (device,) = compiled._plan.placement.machine.devices
    assert device.measured and not device.declared
    assert device.link_bandwidth > 0 and len(device.region_seconds) == 4 and all(s > 0 for s in device.region_seconds)
    # Measured devices declare nothing: their instructions take as long as they take.
    assert all(i.declared_us == 0 for i in compiled._plan.placement.chosen.program.program.schedule.instructions)
    assert f"{example_device}: " in compiled.explain() and "link" in compiled.explain()
    assert "region times measured there" in compiled.explain()


def test_weights_over_the_devices_budget_are_copied_to_it_on_every_call(example_device):
    torch.manual_seed(0)
    model, x = Stack(layers=4).eval(), torch.randn(BATCH, WIDTH)
    budget = int(2.7 * LAYER_BYTES)
    config = tt.CompileConfig(vram_budget_bytes=budget)
    compiled = assert_parity(model, (x,), config=config, devices=[example_device])
    assert not all(compiled._plan.placement.chosen.resident)
    copied = [r for r in compiled.last_report.records if r.kind == "copy" and "params" in r.label]
    assert copied and all(r.bytes == LAYER_BYTES for r in copied)
    assert compiled.last_peak_bytes[example_device] <= budget
    assert list(compiled.last_peak_bytes.values()) == simulated_peaks(compiled)
    backend, index = compiled._plane.devices[example_device]
    assert backend is compiled._plan.placement.machine.devices[0].backend and index == 0


def test_the_cpu_and_an_accelerator_plan_together(example_device):
    torch.manual_seed(0)
    model, x = Stack(layers=4).eval(), torch.randn(BATCH, WIDTH)
    compiled = assert_parity(model, (x,), devices=["cpu", example_device])
    text = compiled.explain()
    assert "cpu: computes in host RAM" in text and f"{example_device}: " in text
    assert set(compiled.region_devices) <= {"cpu", example_device}


def test_auto_takes_the_cpu_and_every_accelerator_found(example_device, monkeypatch):
    from tensortorrent.hardware import accelerator

    torch.manual_seed(0)
    model, x = Stack(layers=2).eval(), torch.randn(BATCH, WIDTH)
    # As if the example were torch's own kind (and the only one: on a GPU machine cuda's
    # devices would join it).
    monkeypatch.setattr(accelerator, "AUTO_KINDS", ("example",))
    compiled = assert_parity(model, (x,), devices="auto")
    assert [d.name for d in compiled._plan.placement.machine.devices] == ["cpu", example_device]
    monkeypatch.setattr(accelerator, "AUTO_KINDS", ())
    alone = assert_parity(model, (x,), devices="auto")  # no kind auto takes: the CPU alone
    assert [d.name for d in alone._plan.placement.machine.devices] == ["cpu"]


def test_training_on_a_backends_device_in_host_memory_gives_eager_gradients(example_device):
    import copy

    torch.manual_seed(0)
    model, x = Stack(layers=4), torch.randn(BATCH, WIDTH)
    eager = copy.deepcopy(model)
    config = tt.CompileConfig(allow_training=True, vram_budget_bytes=int(2.7 * LAYER_BYTES))
    compiled = tt.compile(model, (x,), config=config, devices=[example_device])
    compiled.train()
    compiled(x).square().mean().backward()
    eager(x).square().mean().backward()
    assert any(r.kind == "copy" and "params" in r.label for r in compiled.last_report.records)
    for got, expected in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(got.grad, expected.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("budget_layers", [None, 2.7], ids=["resident", "over-budget"])
def test_training_on_a_device_with_memory_of_its_own_streams_parameters_and_eval_sees_the_steps(
    apart_device, budget_layers
):
    import copy

    torch.manual_seed(0)
    model, x = Stack(layers=4), torch.randn(BATCH, WIDTH)
    eager = copy.deepcopy(model)
    budget = None if budget_layers is None else int(budget_layers * LAYER_BYTES)
    config = tt.CompileConfig(allow_training=True, vram_budget_bytes=budget)
    compiled = tt.compile(model, (x,), config=config, devices=[apart_device])
    if budget is None:  # the eval program holds every weight on the device: its direct path
        assert compiled._on_device is not None
    else:
        assert any(compiled._plan.placement.chosen.resident), "the eval program holds some weights there"
    trainer = compiled._trainer._plan.placement.chosen
    assert trainer.devices == (0,) * 4 and not any(trainer.resident), "training copies every parameter per call"
    assert f"{apart_device}: no weight resident (the optimizer steps the parameters in RAM)" in compiled.explain()

    # Adam divides each step by the root of the gradient's running square: a gradient at
    # float-noise level, a few ulps apart between BLAS kernels on buffers of another
    # alignment, moved 6 of 65,536 weights by 2e-5 in one CI run.
    adam = lambda parameters: torch.optim.Adam(parameters, lr=1e-2)  # noqa: E731
    train_side_by_side(compiled, eager, x, adam, steps=3, tolerance=dict(rtol=1e-4, atol=1e-4))
    assert parameter_copies(compiled) == 8, "each step copies every weight and bias to the device"


@pytest.mark.parametrize("budget_layers", [None, 2.7], ids=["resident", "over-budget"])
def test_new_weights_change_the_outputs_where_the_device_holds_copies(apart_device, budget_layers):
    import copy

    torch.manual_seed(0)
    model, x = Stack(layers=4).eval(), torch.randn(BATCH, WIDTH)
    budget = None if budget_layers is None else int(budget_layers * LAYER_BYTES)
    compiled = tt.compile(model, (x,), config=tt.CompileConfig(vram_budget_bytes=budget), devices=[apart_device])
    compiled(x)
    halved = {name: value * 0.5 for name, value in compiled.state_dict().items()}
    compiled.load_state_dict(halved)
    expected = copy.deepcopy(model)
    torch.testing.assert_close(compiled(x), expected(x), rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # an edit in place, as weight surgery does
        next(model.parameters()).add_(1.0)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)


def test_a_buffer_written_in_place_on_a_device_stays_there_and_a_program_reading_it_in_ram_sees_its_writes(
    apart_device,
):
    torch.manual_seed(0)
    model, eager = Cache(peek=False), Cache(peek=False)
    rows, values = torch.tensor([0, 1]), torch.zeros(2, 4)  # compiling runs it: zeros leave the cache as it is
    on_device = tt.compile(model, (rows, values), devices=[apart_device])
    in_ram = tt.compile(model, (rows, values), devices="cpu")
    assert on_device.in_place_tiers == {apart_device: model.cache.nbytes} and in_ram.in_place_tiers == {"ram": 128}
    program = on_device._plane.plan.program
    copied = [program.buffers[b].bytes for i in program.schedule.instructions if i.kind == K.Copy for b in i.reads]
    assert sum(copied) < model.cache.nbytes, "the inputs and the output cross the link; the cache does not"
    for step in range(4):
        compiled = (on_device, in_ram)[step % 2]
        rows, values = torch.tensor([step, step + 4]), torch.randn(2, 4)
        torch.testing.assert_close(compiled(rows, values), eager(rows, values), msg=f"step {step}")
        if step == 0:  # the device's copy is the cache now; the model's tensor in RAM waits for a reader
            assert not model.cache.any()
    assert list(on_device.last_peak_bytes.values()) == simulated_peaks(on_device)
    torch.testing.assert_close(in_ram(rows, values), eager(rows, values))  # the last writes came back


K = core.InstructionKind
