"""`tensortorrent demo`: compile a small Llama-style decoder, compare it with eager, plan it
on a declared device too small to hold it (saved and loaded back onto it), then run it
from its checkpoint under a RAM budget of half its weights."""

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


def run(args: argparse.Namespace) -> int:
    model = build_decoder(args.layers, args.hidden)
    ids = torch.randint(0, model.config.vocab_size, (1, args.seq))
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"Llama-style decoder: {args.layers} layers, hidden {args.hidden}, {weights / 2**20:.1f} MiB of weights")

    compiled = tt.compile(model, example_inputs=(ids,))
    print(compiled.explain())

    with torch.no_grad():
        expected = model(ids).logits
    got = compiled(ids).logits
    print(f"\nlargest |compiled - eager| on the logits: {(got - expected).abs().max().item():.3e}")

    # Warm up, then interleave the two so that machine noise hits both alike.
    eager_ms, compiled_ms = [], []
    with torch.no_grad():
        model(ids)
        compiled(ids)
        for _ in range(args.runs):
            eager_ms.append(_time_ms(lambda: model(ids)))
            compiled_ms.append(_time_ms(lambda: compiled(ids)))
    eager, ours = statistics.median(eager_ms), statistics.median(compiled_ms)
    print(f"eager {eager:.2f} ms, compiled {ours:.2f} ms (median of {args.runs}); compiled/eager {ours / eager:.3f}")
    run_on_virtual_device(model, ids, expected, weights)
    return run_from_checkpoint(model, ids, expected, weights, eager)


def run_on_virtual_device(model: torch.nn.Module, ids: torch.Tensor, expected: torch.Tensor, weights: int) -> None:
    """The same decoder on a virtual accelerator with room for 60% of its weights. Its
    declared speed is below this CPU's, so that its times, not the host's, are what the
    run shows (the host also copies the streamed bytes while it computes)."""
    device = tt.VirtualDevice("vgpu", memory_bytes=int(weights * 0.6), flops=10e9, link_bandwidth=1e9)
    print(f"\nOn a virtual device: {device}")
    compiled = tt.compile(model, example_inputs=(ids,), devices=["vgpu"], machine=device)
    chosen = compiled._plan.placement.chosen
    streamed = [name for name, resident in zip(compiled.region_devices, chosen.resident) if not resident]
    got = compiled(ids).logits
    compiled(ids)  # the first call warms up
    report = compiled.last_report
    print(
        f"{len(chosen.resident) - len(streamed)} region(s) resident, {len(streamed)} streamed every call; "
        f"peak {compiled.last_peak_bytes['vgpu'] / 2**20:.1f} MiB of {device.memory_bytes / 2**20:.1f} MiB"
    )
    print(
        f"predicted {chosen.measures.latency_s * 1e3:.2f} ms, measured {report.wall_us / 1e3:.2f} ms; "
        f"largest |virtual - eager| on the logits: {(got - expected).abs().max().item():.3e}"
    )
    # An artifact keeps the devices it was compiled for: loading plans onto them again.
    with tempfile.TemporaryDirectory(prefix="demo-artifact-") as folder:
        loaded = tt.load_compiled(compiled.save(os.path.join(folder, "artifact")))
    got = loaded(ids).logits
    print(
        f"saved and loaded back (no model code): {loaded.region_devices.count(device.name)} of "
        f"{len(loaded.region_devices)} region(s) on {device.name}; "
        f"largest |loaded - eager| on the logits: {(got - expected).abs().max().item():.3e}"
    )


def run_from_checkpoint(model, ids: torch.Tensor, expected: torch.Tensor, weights: int, eager_ms: float) -> int:
    """The decoder saved as a sharded checkpoint, compiled from a meta-device copy under a
    RAM budget of half its weights, timed with the checkpoint's page cache dropped before
    each call, against the disk bound: the bytes a call reads at this disk's read speed."""
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
        print(f"\nFrom a checkpoint: {len(files)} shard(s) in {folder}, RAM budget {budget / 2**20:.1f} MiB")
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
        report = compiled.last_report
        read = report.bytes_read
        # What the calls' reads achieved: loads of a few MiB each, a few in flight within
        # the budget, read slower than one long stream over the whole file.
        achieved = read / report.read_us / 1e3 if report.read_us else float("nan")
        largest = max(files, key=os.path.getsize)
        candidates = [(mode, 4, 1 << 20) for mode in ("buffered", "direct")]
        speed = core.measure_read_modes(largest, os.path.getsize(largest), candidates).best.gigabytes_per_second
    bound = max(eager_ms, read / (speed * 1e9) * 1e3)
    ours = statistics.median(times)
    print(
        f"{read / 2**20:.1f} MiB read per call, peak RAM {compiled.last_peak_bytes['ram'] / 2**20:.1f} MiB; "
        f"{ours:.2f} ms per call (median of 3, page cache dropped) vs the bound {bound:.2f} ms "
        f"(max of eager {eager_ms:.2f} ms and the reads at {speed:.2f} GB/s): {ours / bound:.2f}x, "
        f"its own reads running at {achieved:.2f} GB/s; "
        f"largest |checkpoint - eager| on the logits: {(got - expected).abs().max().item():.3e}"
    )
    return 0
