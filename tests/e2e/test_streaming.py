"""Artifact weights streamed from disk under a RAM budget: parity with eager, budgets kept,
peaks as simulated, errors that leave the module usable."""

from __future__ import annotations

import shutil
import textwrap

import pytest
import torch
from torch import nn

import tensortorrent as tt
from conftest import eager_outputs, rss_growth
from tensortorrent import _core
from tensortorrent.planning import weights_on_disk
from tensortorrent.planning.streaming import (
    call_costs,
    choose_disk_tier,
    plan_streaming,
    simulate_plan,
    streamed_regions,
)


def deep_mlp(layers: int = 16, width: int = 128) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(layers)]).eval()


def weight_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


@pytest.fixture(scope="module")
def mlp_artifact(tmp_path_factory):
    model = deep_mlp()
    x = torch.randn(4, 128)
    path = tmp_path_factory.mktemp("stream") / "mlp"
    tt.compile(model, (x,)).save(path)
    return model, x, path


def streamed(path, budget: int, **config) -> tt.CompiledModule:
    return tt.load_compiled(path, config=tt.CompileConfig(ram_budget_bytes=budget, **config))


def test_with_disk_streaming_refused_a_budget_below_the_weights_is_an_error(mlp_artifact):
    model, x, path = mlp_artifact
    budget = weight_bytes(model) // 2
    with pytest.raises(tt.MemoryCapacityError, match="allow_disk_streaming=False keeps them all in RAM"):
        streamed(path, budget, allow_disk_streaming=False)
    with pytest.raises(tt.MemoryCapacityError, match="allow_disk_streaming=False keeps them all there"):
        tt.compile(model, (x,), config=tt.CompileConfig(ram_budget_bytes=budget, allow_disk_streaming=False))
    roomy = streamed(path, 4 * weight_bytes(model), allow_disk_streaming=False)
    torch.testing.assert_close(roomy(x), eager_outputs(model, (x,)))
    assert roomy.last_report.bytes_read == 0


@pytest.mark.parametrize("fraction", [1 / 4, 1 / 3, 1 / 2], ids=["quarter", "third", "half"])
@pytest.mark.parametrize("prefetch", [0, 1, 2])
def test_an_mlp_streams_under_budgets_and_matches_eager(mlp_artifact, fraction, prefetch):
    model, x, path = mlp_artifact
    budget = int(weight_bytes(model) * fraction)
    compiled = streamed(path, budget, prefetch_distance=prefetch)
    expected = eager_outputs(model, (x,))
    for _ in range(3):
        torch.testing.assert_close(compiled(x), expected)
    report = compiled.last_report
    assert 0 < report.bytes_read <= weight_bytes(model)
    assert sum(r.bytes for r in report.records if r.kind == "load") == report.bytes_read
    assert compiled.last_peak_bytes["ram"] <= budget
    assert not compiled.uses_direct_path
    loads = [r for r in report.records if r.kind == "load"]
    assert all(0 <= r.predicted_start_us <= r.predicted_end_us for r in loads), "loads carry the simulator's times"
    text = compiled.explain()
    assert f"prefetch distance: {prefetch}" in text and "read on every call" in text and "streamed per call" in text
    assert "predicted per call" in text


def test_measured_peak_equals_the_simulated_peak(mlp_artifact):
    model, x, path = mlp_artifact
    for prefetch in (0, 1, 2):
        compiled = streamed(path, weight_bytes(model) // 3, prefetch_distance=prefetch)
        compiled(x)
        program = compiled._plane.plan.program
        seconds = [1e-3 if i.kind == _core.InstructionKind.Compute else 0.0 for i in program.schedule.instructions]
        seconds = [
            -1.0 if i.kind == _core.InstructionKind.Load else s for i, s in zip(program.schedule.instructions, seconds)
        ]
        simulated = _core.simulate_program(program, seconds, queue_bytes_per_s=[0.0, 1e9])
        assert compiled.last_peak_bytes["ram"] == simulated.peak_bytes[0]
        assert simulated.peak_bytes[0] <= program.memory_plan.arena_bytes[0]


def test_the_io_engine_overlaps_reads_with_compute(mlp_artifact):
    model, x, path = mlp_artifact
    compiled = streamed(path, weight_bytes(model) // 2, prefetch_distance=2)
    compiled(x)
    report = compiled.last_report
    assert report.read_us > 0 and 0 <= report.read_overlapped_us <= report.read_us + 1e-6


def test_small_streamed_regions_load_further_ahead_within_the_bytes_of_the_largest(tmp_path):
    torch.manual_seed(0)
    wide, narrow = 256, 16  # a large layer, then small ones: 1/16 of its weights each
    pairs = [nn.Linear(*shape) for _ in range(8) for shape in ((wide, narrow), (narrow, wide))]
    layers = [nn.Linear(wide, wide), *pairs]
    model, x = nn.Sequential(*layers).eval(), torch.randn(2, wide)
    tt.compile(model, (x,)).save(tmp_path / "m")
    compiled = streamed(tmp_path / "m", weight_bytes(model) * 3 // 4, prefetch_distance=0)
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))
    plan = compiled._plane.plan
    program, region_of = plan.program, {w.buffer: r for r, ws in plan.streamed.items() for w in ws}
    loads = [i for i in program.schedule.instructions if i.kind == _core.InstructionKind.Load]
    assert len(plan.streamed) > 3
    # The loads after the large layer's all wait for its weights' Free only: as many small
    # regions as fit in its bytes are read together, not one after another.
    instructions = program.schedule.instructions
    gated: dict[int, set[int]] = {}
    for load in loads:
        for free in (d for d in load.deps if instructions[d].kind == _core.InstructionKind.Free):
            gated.setdefault(free, set()).add(region_of[load.writes[0]])
    assert max(len(regions) for regions in gated.values()) >= 8
    seconds = [1e-3 if i.kind == _core.InstructionKind.Compute else 0.0 for i in program.schedule.instructions]
    seconds = [
        -1.0 if i.kind == _core.InstructionKind.Load else s for i, s in zip(program.schedule.instructions, seconds)
    ]
    simulated = _core.simulate_program(program, seconds, queue_bytes_per_s=[0.0, 1e9])
    assert compiled.last_peak_bytes["ram"] == simulated.peak_bytes[0]
    assert simulated.peak_bytes[0] <= program.memory_plan.arena_bytes[0] <= plan.budget_bytes


def test_streamed_regions_are_the_largest_then_spread_through_their_size_ending_with_the_last():
    groups = [[10, 20], [1, 2, 3, 4, 5, 6, 7, 8]]  # two regions of one size, then eight smaller ones
    assert streamed_regions(groups, 1, spread=True) == {20}
    assert streamed_regions(groups, 1, spread=False) == {10}
    assert streamed_regions(groups, 4, spread=True) == {10, 20, 4, 8}
    assert streamed_regions(groups, 4, spread=False) == {10, 20, 1, 2}
    assert streamed_regions(groups, 7, spread=True) == {10, 20, 1, 3, 4, 6, 8}
    assert streamed_regions(groups, 10, spread=True) == {10, 20, *range(1, 9)}


def test_the_planner_streams_the_layout_the_simulator_runs_fastest(mlp_artifact):
    model, x, path = mlp_artifact
    budget = weight_bytes(model) // 2
    plane = streamed(path, budget)._plane
    names = list(plane.plan.region_names)
    layer_s = 64 * 1024 / 1e9 / 4  # every region computes for a quarter of a layer's read
    seconds = [layer_s] * len(names)
    args = (plane.runner, names, plane.weights, budget)
    spread = plan_streaming(*args, 1, 2, spread=True)  # prefetch distance 1, 2 CPU slots
    first = plan_streaming(*args, 1, 2, spread=False)
    assert max(spread.streamed) == max(plane.runner.own_weights), "spread, the last layer streams"
    assert spread.streamed_bytes == first.streamed_bytes
    # Spread, the resident layers between streamed ones compute while the disk reads.
    spread_s = simulate_plan(spread, seconds, 1e9).makespan_s
    assert spread_s < simulate_plan(first, seconds, 1e9).makespan_s
    chosen = choose_disk_tier(*args, 2, [1], seconds, (1e9, 1, 16 << 20))
    assert set(chosen.plan.streamed) == set(spread.streamed) and chosen.simulated.makespan_s == spread_s
    assert "spread through the program, prefetch distance 1: of 2 layout(s) that fit" in chosen.reason
    # More reads in flight win over a faster simulation: the simulator gives one read the
    # bandwidth that the engine measured with all its threads.
    deep = choose_disk_tier(*args, 2, [0, 2], seconds, (1e9, 3, 16 << 20))
    assert deep.plan.prefetch == 2


def test_a_call_report_gives_each_region_its_compute_and_the_read_speed(mlp_artifact):
    model, x, path = mlp_artifact
    compiled = streamed(path, weight_bytes(model) // 2)
    compiled(x)
    report, plane = compiled.last_report, compiled._plane
    measured = call_costs(report, plane.plan, len(plane.plan.region_names))
    computes = [r for r in report.records if r.kind == "compute"]
    assert len(computes) == len(plane.plan.region_names)
    assert sum(measured.region_seconds) == pytest.approx(sum(r.end_us - r.start_us for r in computes) / 1e6)
    assert sum(measured.region_seconds) > 0
    assert measured.read_bytes_per_s == pytest.approx(report.bytes_read / (report.read_us / 1e6))
    # The simulator at that call's own costs: at least its longest region, at most all of it in series.
    again = plane.predicted_at(report)
    assert max(measured.region_seconds) <= again
    assert again <= sum(measured.region_seconds) + report.bytes_read / measured.read_bytes_per_s + 1e-6


def streamable_transformer(name: str) -> nn.Module:
    """Small enough to test, with weights that outweigh a short sequence's activations."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if name == "gpt2":
        config = transformers.GPT2Config(
            n_layer=4, n_embd=128, n_head=4, vocab_size=256, n_positions=64, bos_token_id=0, eos_token_id=0
        )
        return transformers.GPT2LMHeadModel(config).eval()
    config = transformers.LlamaConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=64,
        use_cache=False,
    )
    return transformers.LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def transformer_artifact(request, tmp_path_factory):
    model = streamable_transformer(request.param)
    args = (torch.randint(0, 256, (1, 8)),)
    kwargs = {"use_cache": False} if request.param == "gpt2" else None
    path = tmp_path_factory.mktemp(request.param) / "a"
    tt.compile(model, args, example_kwargs=kwargs).save(path)
    return model, args, kwargs, path


@pytest.mark.parametrize("fraction", [1 / 4, 1 / 3, 1 / 2], ids=["quarter", "third", "half"])
def test_transformers_stream_and_match_eager(transformer_artifact, fraction):
    model, args, kwargs, path = transformer_artifact
    budget = int(weight_bytes(model) * fraction)
    compiled = streamed(path, budget)
    expected = eager_outputs(model, args, kwargs)
    for _ in range(2):
        torch.testing.assert_close(compiled(*args, **(kwargs or {})), expected)
    assert compiled.last_report.bytes_read > 0
    assert compiled.last_peak_bytes["ram"] <= budget


class LinearShowingItsWeight(nn.Linear):
    """A linear layer that also returns a transposed view of its weight."""

    def forward(self, x):
        return super().forward(x).relu(), self.weight.t()


class ReturnsAWeightView(nn.Module):
    """Returns views of weights that only their own layers read, so those weights stream."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(LinearShowingItsWeight(64, 64) for _ in range(8))

    def forward(self, x):
        views = []
        for layer in self.layers:
            x, view = layer(x)
            views.append(view)
        return x, views[1], views[2]


def test_an_output_viewing_a_streamed_weight_stays_correct_across_calls(tmp_path):
    torch.manual_seed(0)
    model = ReturnsAWeightView().eval()
    x = torch.randn(3, 64)
    tt.compile(model, (x,)).save(tmp_path / "a")
    compiled = streamed(tmp_path / "a", weight_bytes(model) * 3 // 4, prefetch_distance=1)
    assert {1, 2} <= set(compiled._plane.plan.streamed), "the viewed weights stream"
    expected = eager_outputs(model, (x,))
    first = compiled(x)
    second = compiled(x)
    torch.testing.assert_close(first, expected)  # the first call's outputs, after the second reused the arena
    torch.testing.assert_close(second, expected)


def test_a_budget_below_the_smallest_working_set_fails_at_load_with_both_figures(mlp_artifact):
    _, _, path = mlp_artifact
    with pytest.raises(tt.MemoryCapacityError, match=r"ram_budget_bytes=1000 \(1000 B\).* below .* \d+ bytes"):
        streamed(path, 1000)


def test_a_truncated_weights_file_fails_the_call_and_the_module_works_again_once_it_is_good(mlp_artifact, tmp_path):
    model, x, path = mlp_artifact
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    compiled = streamed(copy, weight_bytes(model) // 4)
    weights = copy / "weights.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[: len(good) // 2])
    with pytest.raises(tt.StorageError, match="weights.safetensors"):
        compiled(x)
    weights.write_bytes(good)
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))


def test_a_corrupt_weights_file_is_refused_at_load(mlp_artifact, tmp_path):
    _, _, path = mlp_artifact
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    weights = copy / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(tt.StorageError, match=r"chunk 0 .*sha256"):
        streamed(copy, 1 << 20)


def test_concurrent_submitted_calls_share_the_budget(mlp_artifact):
    model, x, path = mlp_artifact
    compiled = streamed(path, weight_bytes(model) // 2, prefetch_distance=1)
    handles = [compiled.submit(x) for _ in range(4)]
    expected = eager_outputs(model, (x,))
    for handle in handles:
        torch.testing.assert_close(handle.result(timeout=60), expected)
        assert handle.report.bytes_read > 0


RSS_CHILD = textwrap.dedent(
    """
    import sys, threading, torch, tensortorrent as tt

    def peak_rss():
        status = open("/proc/self/status").read()
        return int(status.split("VmHWM:")[1].split()[0]) * 1024

    small, big, budget, cases, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    inputs, expected = torch.load(cases)
    warm = tt.load_compiled(small, config=tt.CompileConfig(ram_budget_bytes=1 << 30))
    ready, go, wrong, loaded = threading.Barrier(threads + 1), threading.Barrier(threads + 1), [], {}

    def calls(index):
        # The thread's own state, warm: its stack, torch's per-thread pools, the GEMM
        # library's scratch for layers this wide.
        warm(torch.randn(4, 64))
        width = inputs[index].shape[1]
        torch.nn.functional.linear(inputs[index], torch.randn(width, width))
        ready.wait()
        go.wait()
        for _ in range(2):
            if not torch.allclose(loaded["big"](inputs[index]), expected[index], rtol=1e-4, atol=1e-5):
                wrong.append(index)

    workers = [threading.Thread(target=calls, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    ready.wait()  # the interpreter, torch, our code and every calling thread, loaded and warm
    open("/proc/self/clear_refs", "w").write("5")  # the peak starts again from what is held now
    baseline = peak_rss()
    loaded["big"] = tt.load_compiled(big, config=tt.CompileConfig(ram_budget_bytes=budget))
    go.wait()
    for worker in workers:
        worker.join()
    if wrong:
        sys.exit(f"threads given inputs {sorted(set(wrong))} got outputs other than eager's")
    print(baseline, peak_rss())
    """
)

# What a streamed load may hold beyond its budget: the program archive, the graph modules
# of its regions, I/O thread stacks and allocator slack (docs/budgets.md).
FIXED_OVERHEAD = 24 << 20


@pytest.mark.parametrize("threads", [1, 16])
def test_peak_rss_of_a_fresh_process_stays_within_the_budget(tmp_path, threads):
    """One module streaming under a RAM budget, called from 1 thread or from 16 at once:
    the outputs are eager's, and the process's peak RSS rises by at most the budget."""
    torch.manual_seed(0)
    width = 1024
    big = nn.Sequential(*[nn.Linear(width, width) for _ in range(16)]).eval()  # 64 MiB of weights
    tt.compile(big, (torch.randn(4, width),)).save(tmp_path / "big")
    small = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64)).eval()
    tt.compile(small, (torch.randn(4, 64),)).save(tmp_path / "small")
    inputs = [torch.randn(4, width) for _ in range(threads)]
    torch.save((inputs, [eager_outputs(big, (x,)) for x in inputs]), tmp_path / "cases.pt")
    budget = weight_bytes(big) // 4
    grew = rss_growth(RSS_CHILD, tmp_path / "small", tmp_path / "big", budget, tmp_path / "cases.pt", threads)
    assert grew <= budget + FIXED_OVERHEAD, f"grew {grew} bytes for a {budget}-byte budget"


def test_a_module_streaming_from_an_artifact_saves_a_whole_artifact_again(mlp_artifact, tmp_path):
    model, x, path = mlp_artifact
    compiled = streamed(path, weight_bytes(model) // 2)
    compiled.save(tmp_path / "again")  # the weights are copied from the loaded artifact's file
    again = tt.load_compiled(tmp_path / "again")
    torch.testing.assert_close(again(x), eager_outputs(model, (x,)))


@pytest.mark.parametrize("settled", [True, False], ids=["trusted-while-unchanged", "just-written"])
def test_a_weight_corrupted_after_load_fails_the_call_and_the_module_recovers(
    mlp_artifact, tmp_path, monkeypatch, settled
):
    if settled:  # as if written long ago: verified at load, its loads skip their checksum pass while unchanged
        monkeypatch.setattr(weights_on_disk, "SETTLED_NS", 0)
    model, x, path = mlp_artifact
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    compiled = streamed(copy, weight_bytes(model) // 4)  # nearly everything streams
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))
    checked = compiled._plane.io.stats().ranges_checksummed
    assert checked == 0 if settled else checked > 0
    weights = copy / "weights.safetensors"
    good = weights.read_bytes()
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x01  # one bit, inside a streamed tensor, in the middle of a 16 MiB chunk
    weights.write_bytes(bytes(flipped))
    with pytest.raises(tt.StorageError, match=r"weights.safetensors: bytes \[\d+, \d+\) fail their crc32c checksum"):
        compiled(x)
    weights.write_bytes(good)
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))


def test_python_threads_keep_running_while_loads_are_in_flight(mlp_artifact, monkeypatch):
    import threading
    import time

    from tensortorrent.runtime import streamed_weights

    real = _core.IoEngine
    monkeypatch.setattr(  # every read waits 20 ms first: slow enough to see who holds the GIL
        streamed_weights.core, "IoEngine", lambda **options: real(**options, test_delay_s=0.02)
    )
    model, x, path = mlp_artifact
    compiled = streamed(path, weight_bytes(model) // 4, prefetch_distance=0)
    ticks, stop = [0], threading.Event()

    def count() -> None:
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    try:
        start = time.perf_counter()
        torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))
        elapsed = time.perf_counter() - start
    finally:
        stop.set()
        counter.join()
    assert compiled.last_report.read_us / 1e6 > 0.2  # the call mostly waited for reads
    assert ticks[0] > 0.3 * elapsed / 0.001, "the counting thread was starved: a read held the GIL"
