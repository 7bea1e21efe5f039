"""Layers split between the CPU and a device (planning/layer_split.py): the choice and its
ratio per layer, the program's structure, what crosses the link, peaks and parity."""

from __future__ import annotations

import functools
import statistics

import pytest
import torch
from e2e.test_peaks import simulated_peaks
from e2e.test_virtual_devices import Stack
from torch import nn

import tensortorrent as tt
from conftest import assert_parity
from tensortorrent.planning.costs import measure_cpu_seconds
from tensortorrent.planning.layer_split import ROW_MULTIPLE, SplittableLayer, device_rows

WIDTH = 1024
LAYER_BYTES = (WIDTH * WIDTH + WIDTH) * 4


def stack(layers: int = 4) -> nn.Module:
    return Stack(layers, WIDTH).eval()


@functools.cache
def cpu_layer_seconds() -> float:
    """What this CPU takes for one layer at batch 1, measured as the planner measures it
    (its kernels differ by machine: aten's BLAS or oneDNN, 0.04 to 0.4 ms)."""
    x = torch.randn(1, WIDTH)
    compiled = tt.compile(stack(), (x,), devices="cpu", config=tt.CompileConfig(prefer_direct_path=False))
    # The least of three medians: a busy spell on a shared machine only ever slows a
    # measurement, and a link calibrated to a slow one makes the cpu alone look best.
    return min(statistics.median(measure_cpu_seconds(compiled._runner, [x], repeats=9)) for _ in range(3))


def small_device(speedup: float = 1.0) -> tt.VirtualDevice:
    # Room for one and a half layers: no layer stays resident, every one moves per call. The
    # link copies a layer in what the cpu takes for it at batch 1 (over `speedup`): a split
    # beats both.
    bandwidth = speedup * LAYER_BYTES / cpu_layer_seconds()
    return tt.VirtualDevice("acc", memory_bytes=int(1.5 * LAYER_BYTES), flops=1e12, link_bandwidth=bandwidth)


@pytest.fixture(scope="module")
def split_at_batch_1():
    torch.manual_seed(0)
    model = stack()
    x = torch.randn(1, WIDTH)
    compiled = assert_parity(model, (x,), devices=["cpu", "acc"], machine=small_device())
    return model, x, compiled


def test_at_batch_1_every_layer_is_split_in_the_ratio_that_equalises_both_sides(split_at_batch_1):
    _, _, compiled = split_at_batch_1
    chosen = compiled._plan.placement.chosen
    # A region per Linear (the device cannot hold the weights), each one split.
    assert len(chosen.splits) == 4 and all(s.layer.rows == WIDTH for s in chosen.splits)
    table = compiled._plan.placement.compute_s
    link_s = LAYER_BYTES / small_device().link_bandwidth
    for split in chosen.splits:
        assert 0 < split.device_rows < WIDTH and split.device_rows % ROW_MULTIPLE == 0
        cpu_s, device_s = table[split.layer.region]
        # f max(L, D) = (1 - f) C + o: the device's share grows with the cpu's time.
        expected = (cpu_s) / (cpu_s + max(link_s, device_s))
        assert split.device_share == pytest.approx(expected, abs=0.05)
    text = compiled.explain()
    assert "Layers whose weights live in host RAM" in text
    assert text.count("split: rows 0:") == 4
    assert "4 layer(s) split" in text


def test_a_split_layer_copies_only_the_devices_rows_and_its_halves_join_on_the_device(split_at_batch_1):
    model, x, compiled = split_at_batch_1
    torch.testing.assert_close(compiled(x), model(x))
    plan = compiled._plane.plan
    program = plan.program
    rows = {s.layer.region: s.device_rows for s in plan.splits}
    labels = [i.label for i in program.schedule.instructions]
    for region in rows:
        name = plan.region_names[region]
        assert f"{name} cpu rows" in labels and f"{name} join" in labels
        assert f"{name} cpu rows -> acc" in labels
    moved = {r.label: r.bytes for r in compiled.last_report.records if r.kind == "copy"}
    for region, device_rows_count in rows.items():
        name = plan.region_names[region]
        assert moved[f"{name} weights -> acc"] == device_rows_count * (WIDTH + 1) * 4
        assert moved[f"{name} cpu rows -> acc"] == (WIDTH - device_rows_count) * 4
    weights_moved = sum(b for label, b in moved.items() if label.endswith("weights -> acc"))
    assert weights_moved < 0.7 * 4 * LAYER_BYTES


def test_a_split_plan_holds_the_weights_once_in_ram_and_its_peaks_are_the_simulated_ones(split_at_batch_1):
    _, x, compiled = split_at_batch_1
    compiled(x)
    peaks = compiled.last_peak_bytes
    assert list(peaks.values()) == simulated_peaks(compiled)
    assert 4 * LAYER_BYTES <= peaks["ram"] <= 4 * LAYER_BYTES + (64 << 10)
    assert 0 < peaks["acc"] <= small_device().memory_bytes


def test_a_cpu_faster_than_the_link_keeps_its_layers():
    torch.manual_seed(0)
    model = stack(layers=2)
    x = torch.randn(1, WIDTH)
    slow_link = tt.VirtualDevice("acc", memory_bytes=int(1.5 * LAYER_BYTES), flops=1e12, link_bandwidth=0.1e9)
    on_cpu = assert_parity(model, (x,), devices=["cpu", "acc"], machine=slow_link)
    assert set(on_cpu.region_devices) == {"cpu"} and not on_cpu._plan.placement.chosen.splits
    text = on_cpu.explain()
    assert text.count("computed on the cpu from host RAM") == 2
    assert text.count("copying its weights: acc 41.98") == 2  # why: (1 MiB + bias) at 0.1 GB/s, against the cpu's time


@pytest.mark.parametrize(
    ("cpu_ms", "device_ms", "choice"),
    [
        (0.4, 0.01, "split"),  # batch 1 on a GPU: the cpu about as fast as the link (0.42 ms)
        (40.0, 0.2, "copy"),  # a large batch: the cpu far slower, the device still link-bound
        (0.004, 0.01, "cpu"),  # a layer the cpu computes long before its weights could cross
    ],
)
def test_the_choice_follows_the_cpus_time_against_the_links(cpu_ms, device_ms, choice):
    layer = SplittableLayer(region=0, weight=0, bias=1, rows=WIDTH)
    link_s = LAYER_BYTES / 10e9
    rows = device_rows(layer, cpu_ms / 1e3, device_ms / 1e3, link_s, overhead_s=1e-6)
    got = "split" if rows else ("copy" if cpu_ms / 1e3 > link_s else "cpu")
    assert got == choice, rows
    if choice == "split":
        assert rows == pytest.approx(WIDTH * 0.4 / (0.4 + 0.42), abs=ROW_MULTIPLE)


def test_transformer_linears_share_a_small_device_with_the_cpu():
    transformers = pytest.importorskip("transformers")
    from tiny_transformers import DECODER

    wider = dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=1, num_attention_heads=8)
    config = transformers.LlamaConfig(**{**DECODER, **wider, "num_key_value_heads": 4, "vocab_size": 256})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 256, (1, 4))
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    device = tt.VirtualDevice("acc", memory_bytes=weights // 4, flops=1e12, link_bandwidth=20e9)
    compiled = assert_parity(model, (ids,), devices=["cpu", "acc"], machine=device)
    # A region per Linear: each one can be copied, kept on the cpu or split.
    assert compiled.region_count > 20
    assert "Layers whose weights live in host RAM" in compiled.explain()
    assert compiled.last_peak_bytes["acc"] <= device.memory_bytes
    assert list(compiled.last_peak_bytes.values()) == simulated_peaks(compiled)
