"""Region costs: FLOPs from shapes, output bytes, CPU times measured at compile and saved."""

from __future__ import annotations

import torch
from torch import nn

import tensortorrent as tt
from tensortorrent.planning.costs import node_flops


def test_flops_of_dense_ops_follow_their_shapes():
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32))
    compiled = tt.compile(model, example_inputs=(torch.randn(8, 64),), config=tt.CompileConfig(max_region_nodes=1))
    flops = [cost.flops for cost in compiled.region_costs]
    assert flops == [2 * 8 * 128 * 64, 8 * 128, 2 * 8 * 32 * 128]
    assert [cost.output_bytes for cost in compiled.region_costs] == [8 * 128 * 4, 8 * 128 * 4, 8 * 32 * 4]


def test_attention_and_convolution_flops():
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    compiled = tt.compile(layer, example_inputs=(torch.randn(2, 6, 32),))
    program = compiled._program
    sdpa = next(n for n in program.compute_nodes if "scaled_dot_product" in str(n.target))
    assert node_flops(sdpa) == 4 * (2 * 4 * 6 * 8) * 6
    conv = tt.compile(nn.Conv2d(3, 8, 3), example_inputs=(torch.randn(1, 3, 10, 10),))
    assert conv.region_costs[0].flops == 2 * (8 * 8 * 8) * (3 * 3 * 3)


def test_cpu_time_is_measured_at_compile_shown_and_saved(tmp_path):
    model = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8))
    compiled = tt.compile(model, example_inputs=(torch.randn(4, 64),), config=tt.CompileConfig(max_region_nodes=2))
    seconds = [cost.cpu_seconds for cost in compiled.region_costs]
    assert all(s is not None and s > 0 for s in seconds)
    assert "measured at compile:" in compiled.explain() and "MFLOP" in compiled.explain()
    compiled.save(tmp_path / "a")
    loaded = tt.load_compiled(tmp_path / "a")
    assert [cost.cpu_seconds for cost in loaded.region_costs] == seconds
    replanned = tt.load_compiled(tmp_path / "a", config=tt.CompileConfig(max_region_nodes=1))
    assert all(cost.cpu_seconds is None for cost in replanned.region_costs)
    assert replanned.profile(torch.randn(4, 64))[0] > 0


def test_region_times_are_reused_by_profiling_key(monkeypatch, packed_always_faster):
    # A region's key names its kernel (packed or not), which each compile times: fixed here,
    # or a compile whose timing chose otherwise measures again (CI-local saw [3, 3] once).
    from tensortorrent.planning import profile_cache

    measured = []

    def counting(runner, flat_inputs):
        measured.append(len(runner.kernels))
        return real(runner, flat_inputs)

    real = profile_cache.measure_cpu_seconds
    monkeypatch.setattr(profile_cache, "measure_cpu_seconds", counting)
    model = nn.Sequential(nn.Linear(48, 48), nn.Tanh(), nn.Linear(48, 48))
    config = tt.CompileConfig(max_region_nodes=1)

    def compile_for(rows):
        return tt.compile(model, example_inputs=(torch.randn(rows, 48),), config=config)

    first, again = compile_for(3), compile_for(3)
    assert measured == [3]  # the second compile reused every region's time
    assert [c.cpu_seconds for c in again.region_costs] == [c.cpu_seconds for c in first.region_costs]
    compile_for(5)  # other shapes: other keys
    assert measured == [3, 3]
    monkeypatch.setenv("TT_PROFILE_CACHE", "0")
    compile_for(3)
    assert measured == [3, 3, 3]
