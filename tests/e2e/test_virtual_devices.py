"""Plans on virtual devices: placement by objective, residency and streaming, transfers, budgets."""

from __future__ import annotations

import gc
import json
import threading

import pytest
import torch
from torch import nn

import tensortorrent as tt
from conftest import ProbeChain, assert_parity, eager_outputs
from tensortorrent import _core

WIDTH, BATCH = 256, 8
LAYER_BYTES = (WIDTH * WIDTH + WIDTH) * 4  # one Linear's parameters


class Stack(nn.Module):
    """A chain of Linear+ReLU layers: one region per layer."""

    def __init__(self, layers: int = 6, width: int = WIDTH) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def fast_small() -> tt.VirtualDevice:
    # Holds about three layers besides its streaming room. A layer takes 1 ms here, 21 ms on
    # the slow device and 26 ms to stream over the link, so streaming loses to the slow
    # device. Declared times far above the cpu's keep the choice stable on a loaded machine.
    return tt.VirtualDevice("fast", memory_bytes=int(5.7 * LAYER_BYTES), flops=1e9, link_bandwidth=10e6)


def slow_large() -> tt.VirtualDevice:
    return tt.VirtualDevice("slow", memory_bytes=64 << 20, flops=0.05e9, link_bandwidth=10e6)


def compile_on(model, devices, objective=tt.Objective.LATENCY, machine=None, **config):
    x = torch.randn(BATCH, WIDTH)
    return assert_parity(
        model,
        (x,),
        config=tt.CompileConfig(objective=objective, **config),
        devices=devices,
        machine=machine if machine is not None else [fast_small(), slow_large()],
    )


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Stack().eval()


def test_latency_splits_the_model_as_the_fast_device_allows(model):
    compiled = compile_on(model, ["fast", "slow"])
    devices = compiled.region_devices
    assert set(devices) == {"fast", "slow"}, devices
    chosen = compiled._plan.placement.chosen
    resident_on_fast = [r for r, d in enumerate(devices) if d == "fast" and chosen.resident[r]]
    # At least the layers its room allows besides two streamed ones and activations stay
    # resident (the simulator may find room for more), within its memory.
    assert len(resident_on_fast) >= 3
    assert len(resident_on_fast) * LAYER_BYTES <= fast_small().memory_bytes
    compiled(torch.randn(BATCH, WIDTH))
    assert 0 < compiled.last_peak_bytes["fast"] <= fast_small().memory_bytes
    assert "objective: LATENCY" in compiled.explain()


def test_memory_keeps_the_whole_model_on_the_large_device(model):
    compiled = compile_on(model, ["fast", "slow"], objective="memory")
    assert compiled.region_devices == ["slow"] * len(model.layers)
    assert all(compiled._plan.placement.chosen.resident)
    assert "objective: MEMORY" in compiled.explain()


def test_every_objective_plans_and_matches_eager(model):
    for objective, weights in [
        (tt.Objective.THROUGHPUT, None),
        (tt.Objective.BALANCED, None),
        (tt.Objective.WEIGHTED, {"latency": 1.0, "memory": 0.5}),
    ]:
        compiled = compile_on(model, ["fast", "slow"], objective=objective, objective_weights=weights)
        assert f"objective: {objective.name}" in compiled.explain()


def test_a_model_larger_than_the_device_streams_what_does_not_fit(model, tmp_path):
    device = fast_small()
    assert sum(p.numel() * 4 for p in model.parameters()) > device.memory_bytes
    compiled = compile_on(model, ["fast"], machine=[device])
    resident = compiled._plan.placement.chosen.resident
    assert 0 < sum(resident) < len(resident)  # keeps what fits, streams the rest

    x = torch.randn(BATCH, WIDTH)
    for _ in range(2):  # streamed weights are moved on every call
        torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))
        records = compiled.last_report.records
        streamed = [r for r in records if r.kind == "copy" and "params" in r.label]
        assert len(streamed) == len(resident) - sum(resident)
        assert all(r.ran and r.device == "fast.h2d" for r in streamed)
        assert compiled.last_peak_bytes["fast"] <= device.memory_bytes

    trace = json.loads(open(compiled.trace(tmp_path / "trace.json")).read())
    kinds = {event.get("cat") for event in trace["traceEvents"] if event.get("ph") == "X"}
    assert {"compute", "copy", "free"} <= kinds
    explained = compiled.explain()
    assert "resident on fast" in explained and "streamed/call" in explained


def test_transfers_take_at_least_their_declared_time(model):
    compiled = compile_on(model, ["fast"], machine=[fast_small()])
    compiled(torch.randn(BATCH, WIDTH))
    timed = [r for r in compiled.last_report.records if r.kind in ("compute", "copy")]
    assert {r.kind for r in timed} == {"compute", "copy"}
    for record in timed:
        assert record.predicted_end_us > record.predicted_start_us >= 0
        declared = record.predicted_end_us - record.predicted_start_us
        assert record.end_us - record.start_us >= 0.99 * declared, record.label


def test_the_cpu_and_a_small_device_share_a_transformer():
    pytest.importorskip("transformers")
    from e2e.test_parity_transformers import llama

    torch.manual_seed(0)
    model = llama()
    # A device as fast as the cpu (it cannot be faster: the cpu runs it) with room for about one
    # decoder layer: for throughput, the plan shares the work between the two.
    device = tt.VirtualDevice("acc", memory_bytes=600 << 10, flops=1e12, link_bandwidth=10e9)
    ids = torch.randint(0, 128, (2, 12))
    config = tt.CompileConfig(objective="throughput")
    compiled = assert_parity(model, (ids,), config=config, devices=["cpu", "acc"], machine=device)
    assert set(compiled.region_devices) == {"cpu", "acc"}
    assert compiled.last_peak_bytes["acc"] <= device.memory_bytes


def test_a_budget_too_small_for_any_region_raises_planning_error(model):
    tiny = tt.VirtualDevice("tiny", memory_bytes=4096, flops=1e9, link_bandwidth=1e9)
    with pytest.raises(tt.PlanningError, match="tiny") as caught:
        tt.compile(model, (torch.randn(BATCH, WIDTH),), devices=["tiny"], machine=tiny)
    error = caught.value
    assert error.tier == "tiny" and error.allowed_bytes == 4096 and error.needed_bytes > 4096


def test_a_ram_budget_the_working_set_exceeds_raises_planning_error(model):
    # The weights fit the RAM budget (the early gate passes) but not with a large input's activations.
    big = torch.randn(4096, WIDTH)
    budget = sum(p.numel() * 4 for p in model.parameters()) + big.numel() * 4 + 1024
    with pytest.raises(tt.PlanningError, match="host RAM") as caught:
        tt.compile(model, (big,), config=tt.CompileConfig(ram_budget_bytes=budget))
    assert caught.value.tier == "ram" and caught.value.needed_bytes > caught.value.allowed_bytes == budget


def test_weights_over_the_ram_budget_stream_from_disk_through_ram_to_a_device(model, tmp_path, monkeypatch):
    monkeypatch.setenv("TT_SPILL_DIR", str(tmp_path))  # the weights cache the weights stream from
    device = tt.VirtualDevice("small", memory_bytes=3 * LAYER_BYTES, flops=1e11, link_bandwidth=1e10)
    budget = 2 * LAYER_BYTES  # a third of the weights
    x = torch.randn(BATCH, WIDTH)
    compiled = tt.compile(
        model, (x,), devices=["small"], machine=device, config=tt.CompileConfig(ram_budget_bytes=budget)
    )
    expected = eager_outputs(model, (x,))
    for _ in range(3):
        torch.testing.assert_close(compiled(x), expected)
    assert set(compiled.region_devices) == {"small"}
    plan = compiled._plane.plan
    report = compiled.last_report
    assert report.bytes_read == plan.streamed_bytes > 0
    # Each streamed region: its weights loaded into RAM, then copied to the device in one Copy.
    weight_copies = [r for r in report.records if r.kind == "copy" and r.label.endswith("weights -> small")]
    assert len(weight_copies) == len(plan.streamed) and all(r.device == "small.h2d" for r in weight_copies)
    loads = [r for r in report.records if r.kind == "load"]
    assert sum(r.bytes for r in loads) == report.bytes_read
    peaks = compiled.last_peak_bytes
    assert peaks["ram"] <= budget and peaks["small"] <= device.memory_bytes
    program = plan.program
    simulated = _core.simulate_program(program, list(plan.seconds), queue_bytes_per_s=[0.0, 1e9, 0.0, 0.0, 0.0])
    assert [peaks["ram"], peaks["small"]] == list(simulated.peak_bytes[:2])
    assert "Weights streamed from disk" in compiled.explain()


def test_virtual_devices_are_only_used_when_named(model):
    compiled = tt.compile(model, (torch.randn(BATCH, WIDTH),), machine=[fast_small()])
    assert set(compiled.region_devices) == {"cpu"}


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"devices": ["fast", "gpu7"]}, tt.InvalidArgumentError, "unknown device 'gpu7'; known: 'cpu', 'fast'"),
        ({"devices": ["fast", "fast"]}, tt.InvalidArgumentError, "more than once"),
        ({"devices": ["cuda:9"]}, tt.InvalidArgumentError, "unknown device 'cuda:9'; known: 'cpu', 'fast'"),
        ({"devices": [], "machine": None}, tt.InvalidArgumentError, "non-empty list"),
        ({"machine": "fast"}, tt.InvalidArgumentError, "machine: expected a tt.VirtualDevice"),
        ({"machine": [fast_small(), fast_small()]}, tt.InvalidArgumentError, "distinct"),
    ],
)
def test_bad_devices_and_machines_are_named(model, kwargs, error, match):
    arguments = {"devices": ["fast"], "machine": [fast_small()], **kwargs}
    with pytest.raises(error, match=match):
        tt.compile(model, (torch.randn(BATCH, WIDTH),), **arguments)


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"name": ""}, tt.ConfigTypeError, "non-empty"),
        ({"name": "cpu"}, tt.ConfigValueError, "other than"),
        ({"memory_bytes": 0}, tt.ConfigValueError, "memory_bytes: expected an int > 0, got 0"),
        ({"memory_bytes": 1.5}, tt.ConfigTypeError, "memory_bytes: expected an int, got float"),
        ({"flops": -1.0}, tt.ConfigValueError, "flops: expected a finite number > 0"),
        ({"link_bandwidth": "fast"}, tt.ConfigTypeError, "link_bandwidth: expected a number, got str"),
        ({"link_latency_s": float("nan")}, tt.ConfigValueError, "link_latency_s"),
    ],
)
def test_bad_virtual_devices_are_refused(fields, error, match):
    arguments = {"name": "dev", "memory_bytes": 1 << 20, "flops": 1e9, "link_bandwidth": 1e9, **fields}
    with pytest.raises(error, match=match):
        tt.VirtualDevice(**arguments)


def test_calls_from_several_threads_share_a_device_safely(model):
    device = tt.VirtualDevice("quick", memory_bytes=int(4.5 * LAYER_BYTES), flops=1e12, link_bandwidth=1e10)
    compiled = compile_on(model, ["quick"], machine=[device])
    inputs = [torch.randn(BATCH, WIDTH) for _ in range(4)]
    expected = [eager_outputs(model, (x,)) for x in inputs]
    errors = []

    def worker(index):
        try:
            for _ in range(5):
                torch.testing.assert_close(compiled(inputs[index]), expected[index])
        except Exception as error:  # reported below, on the test's thread
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert compiled.last_peak_bytes["quick"] <= device.memory_bytes
    # Every call gave its streamed weights back: only resident parameters stay counted.
    plane = compiled._plane
    assert plane.plane.held(1) == plane.plan.program.memory_plan.resident_bytes[1]


def test_a_cancelled_call_gives_its_device_memory_back(hooks):
    torch.manual_seed(0)
    chain = ProbeChain(stages=4, width=64).eval()
    layer = (64 * 64 + 64) * 4
    device = tt.VirtualDevice("quick", memory_bytes=int(2.5 * layer), flops=1e12, link_bandwidth=1e10)
    x = torch.randn(2, 64)
    config = tt.CompileConfig(max_region_nodes=1)  # one region per op: many steps to stop between
    compiled = tt.compile(chain, (x,), config=config, devices=["quick"], machine=device)
    assert not all(compiled._plan.placement.chosen.resident)  # some weights are streamed
    plane = compiled._plane.plane
    resident = compiled._plane.plan.program.memory_plan.resident_bytes[1]
    hooks.on_probe = lambda tag: compiled.request_cancel() if tag == 1 else None
    with pytest.raises(tt.ExecutionCancelled):
        compiled(x)
    assert plane.held(1) == resident
    backend, index = compiled._plane.devices["quick"]
    gc.collect()
    assert backend.memory(index).allocated == 0  # nor did the device's backend keep any of its copies
    hooks.on_probe = None
    torch.testing.assert_close(compiled(x), eager_outputs(chain, (x,)))


@pytest.mark.parametrize("name", ["gpt2", "bert", "vit", "resnet"])
def test_transformers_architectures_stream_through_a_small_device(name):
    pytest.importorskip("transformers")
    from e2e import test_parity_transformers as zoo

    torch.manual_seed(0)
    model = getattr(zoo, name)()
    args, kwargs = zoo.example_inputs(name)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    # 60% of the weights; ResNet's activations outweigh its weights, so it gets 96 KiB.
    device = tt.VirtualDevice("acc", memory_bytes=max(int(0.6 * weights), 96 << 10), flops=1e12, link_bandwidth=1e10)
    compiled = assert_parity(model, args, kwargs, devices=["acc"], machine=device)
    assert compiled.last_peak_bytes["acc"] <= device.memory_bytes
    if name != "resnet":
        assert not all(compiled._plan.placement.chosen.resident)  # some weights stream on every call


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_transformers_over_the_ram_budget_run_from_a_device_their_weights_are_read_onto_once(
    name, tmp_path, monkeypatch
):
    pytest.importorskip("transformers")
    from e2e import test_parity_transformers as zoo

    monkeypatch.setenv("TT_SPILL_DIR", str(tmp_path))
    torch.manual_seed(0)
    model = getattr(zoo, name)()
    args, kwargs = zoo.example_inputs(name)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    device = tt.VirtualDevice("acc", memory_bytes=weights, flops=1e12, link_bandwidth=1e10)
    config = tt.CompileConfig(ram_budget_bytes=weights // 2)
    compiled = assert_parity(model, args, kwargs, devices=["acc"], machine=device, config=config)
    plan = compiled._plane.plan
    on_device = {slot for slot, buffer in plan.resident.items() if plan.program.buffers[buffer].tier == 1}
    assert on_device, "weights only device regions read are read from disk onto the device, not into RAM"
    assert compiled.last_report.bytes_read == 0, "all resident: nothing read per call"
    assert compiled.last_peak_bytes["ram"] <= weights // 2 and compiled.last_peak_bytes["acc"] <= device.memory_bytes


def test_a_one_region_plan_kept_on_the_cpu_takes_the_cpu_direct_path():
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(16, 16), nn.ReLU()).eval(), torch.randn(4, 16)
    device = tt.VirtualDevice("dev", memory_bytes=64 << 20, flops=1e6, link_bandwidth=1e6)
    compiled = tt.compile(model, (x,), devices=["cpu", "dev"], machine=[device])
    assert compiled.region_devices == ["cpu"] and compiled.uses_direct_path
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))
