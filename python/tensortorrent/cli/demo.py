"""`tensortorrent demo`: a small Llama-style decoder compiled three ways, each told in a few
lines: in RAM against eager, on a declared device too small to hold it (saved and loaded
back onto it), and from its checkpoint under a RAM budget of half its weights against the
disk bound."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

import tensortorrent as tt

from .. import core
from ..files import drop_page_cache
from ..hardware.budgets import spill_root
from ..storage.checkpoint import open_checkpoint


def add_parser(commands) -> None:
    parser = commands.add_parser("demo", help="compile a Llama-style decoder (random weights) and compare with eager")
    parser.add_argument("--layers", type=int, default=4, help="decoder layers (default 4)")
    parser.add_argument("--hidden", type=int, default=256, help="hidden size (default 256)")
    parser.add_argument("--seq", type=int, default=64, help="sequence length (default 64)")
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each (default 7)")
    parser.set_defaults(run=run)


def build_decoder(layers: int, hidden: int) -> torch.nn.Module:
    """A Llama-architecture decoder from a transformers config, with random weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=4096,
        hidden_size=hidden,
        intermediate_size=hidden * 8 // 3,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        num_key_value_heads=max(1, hidden // 128),
        max_position_embeddings=512,
        use_cache=False,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _time_ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def _difference(got: torch.Tensor, expected: torch.Tensor) -> str:
    return f"largest difference from eager on the logits {(got - expected).abs().max().item():.1e}"


def run(args: argparse.Namespace) -> int:
    model = build_decoder(args.layers, args.hidden)
    ids = torch.randint(0, model.config.vocab_size, (1, args.seq))
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    print(
        f"TensorTorrent demo: a Llama-style decoder ({args.layers} layers, hidden {args.hidden}, random weights, "
        f"{_mib(weights)}), {args.seq} tokens in\n"
    )
    with torch.no_grad():
        expected = model(ids).logits
    eager_ms, compiled_ms = run_in_ram(model, ids, expected, args.runs)
    run_on_virtual_device(model, ids, expected, weights)
    return run_from_checkpoint(model, ids, expected, weights, min(eager_ms, compiled_ms))


def run_in_ram(model: torch.nn.Module, ids: torch.Tensor, expected: torch.Tensor, runs: int) -> tuple[float, float]:
    """Compiled for this CPU with the weights in RAM, timed against eager (interleaved, so
    that the machine's noise hits both alike); the medians of each."""
    start = time.perf_counter()
    compiled = tt.compile(model, example_inputs=(ids,), devices="cpu")
    compile_s = time.perf_counter() - start
    path = "one call of the whole model" if compiled.uses_direct_path else "run by the data plane"
    print(f"1. In RAM on this CPU: compiled in {compile_s:.1f} s into {compiled.region_count} region(s), {path}")
    got = compiled(ids).logits
    eager_ms, compiled_ms = [], []
    with torch.no_grad():
        model(ids)  # both warm up first
        for _ in range(runs):
            eager_ms.append(_time_ms(lambda: model(ids)))
            compiled_ms.append(_time_ms(lambda: compiled(ids)))
    eager, ours = statistics.median(eager_ms), statistics.median(compiled_ms)
    print(
        f"   {ours:.2f} ms per call against eager PyTorch's {eager:.2f} ms: {ours / eager:.2f}x "
        f"(medians of {runs}); {_difference(got, expected)}"
    )
    return eager, ours


def run_on_virtual_device(model: torch.nn.Module, ids: torch.Tensor, expected: torch.Tensor, weights: int) -> None:
    """The same decoder on a virtual accelerator with room for 60% of its weights. Its
    declared speed is below this CPU's, so that its times, not the host's, are what the
    run shows (the host also copies the streamed bytes while it computes)."""
    device = tt.VirtualDevice("vgpu", memory_bytes=int(weights * 0.6), flops=10e9, link_bandwidth=1e9)
    compiled = tt.compile(model, example_inputs=(ids,), devices=["vgpu"], machine=device)
    chosen = compiled._plan.placement.chosen
    streamed = sum(not resident for resident in chosen.resident)
    got = compiled(ids).logits
    compiled(ids)  # the first call warms up
    report = compiled.last_report
    print(
        f"\n2. On a declared device too small for the weights: {device.name}, {_mib(device.memory_bytes)} "
        f"(60% of them), {device.flops / 1e9:g} GFLOP/s, a {device.link_bandwidth / 1e9:g} GB/s link"
    )
    print(
        f"   {len(chosen.resident) - streamed} region(s) keep their weights there, {streamed} copy theirs over "
        f"the link every call; peak {_mib(compiled.last_peak_bytes[device.name])} of "
        f"{_mib(device.memory_bytes)}"
    )
    print(
        f"   {report.wall_us / 1e3:.2f} ms per call, {chosen.measures.latency_s * 1e3:.2f} ms predicted; "
        f"{_difference(got, expected)}"
    )
    # An artifact keeps the devices it was compiled for: loading plans onto them again.
    with tempfile.TemporaryDirectory(prefix="demo-artifact-") as folder:
        loaded = tt.load_compiled(compiled.save(os.path.join(folder, "artifact")))
    got = loaded(ids).logits
    print(
        f"   saved, and loaded back without the model's code: {loaded.region_devices.count(device.name)} of "
        f"{len(loaded.region_devices)} region(s) on {device.name}; {_difference(got, expected)}"
    )


def run_from_checkpoint(model, ids: torch.Tensor, expected: torch.Tensor, weights: int, compute_ms: float) -> int:
    """The decoder saved as a sharded checkpoint, compiled from a meta-device copy under a
    RAM budget of half its weights, timed with the checkpoint's page cache dropped before
    each call, against the bound of BENCHMARKS.md's S2: the slower of the compute (the
    faster of eager and the in-RAM module) and reading what the budget cannot hold (the
    weights less the budget) at this disk's best read speed."""
    budget = weights // 2
    spill = spill_root(None)  # TT_SPILL_DIR where set: on a disk (a temporary folder may be in RAM)
    os.makedirs(spill, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="demo-checkpoint-", dir=spill) as folder:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # the shards take no time to write
        try:
            model.save_pretrained(folder, max_shard_size=f"{max(1, weights // 4 // 2**20)}MB")
        finally:
            transformers_logging.enable_progress_bar()
        files = open_checkpoint(folder).files
        with torch.device("meta"):
            meta = type(model)(model.config)
        config = tt.CompileConfig(ram_budget_bytes=budget)
        compiled = tt.compile(meta, example_inputs=(ids,), checkpoint=folder, config=config)
        got = compiled(ids).logits
        times = []
        for _ in range(3):
            for path in files:
                drop_page_cache(path)
            times.append(_time_ms(lambda: compiled(ids)))
        read = compiled.last_report.bytes_read
        largest = max(files, key=os.path.getsize)
        candidates = [(mode, 4, 1 << 20) for mode in ("buffered", "direct")]
        speed = core.measure_read_modes(largest, os.path.getsize(largest), candidates).best.gigabytes_per_second
    must_read = weights - budget
    bound = max(compute_ms, must_read / (speed * 1e9) * 1e3)
    ours = statistics.median(times)
    print(
        f"\n3. From a checkpoint of {len(files)} shard(s), the model built on the meta device, under a RAM budget "
        f"of {_mib(budget)} (half the weights)"
    )
    print(
        f"   the weights stay in their files: {_mib(weights - read)} kept in RAM, {_mib(read)} read from disk "
        f"every call; peak RAM {_mib(compiled.last_peak_bytes['ram'])}"
    )
    print(
        f"   {ours:.2f} ms per call (page cache dropped, median of 3) against the disk bound {bound:.2f} ms "
        f"(compute {compute_ms:.2f} ms, or {_mib(must_read)} at {speed:.2f} GB/s): {ours / bound:.2f}x; "
        f"{_difference(got, expected)}"
    )
    return 0
