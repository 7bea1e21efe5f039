"""Suite S4 of ../shared/BENCHMARKS.md (a machine with a GPU). First, beyond VRAM: a
decoder with the Qwen3-8B architecture (random bf16 weights, about 16.4 GB) under an
8 GiB VRAM budget against Accelerate's device_map="auto" with the same budget, and the
bound N / (B_h2d + R_cpu) from figures measured here. Then fit in VRAM, eager vs
TensorTorrent on the device; last, models that fit compiled: TensorTorrent's inductor
regions against whole-model torch.compile on the device.

    python bench/s4_gpu.py --out OUT.json            # on the GPU machine (bench/gpu_check.sh)
    python bench/s4_gpu.py --quick --device cpu --out /tmp/s4.json   # a smoke run of the code paths

Every stage writes the results so far, and a stage that fails is recorded with its error,
never dropped: one run on a lent GPU must give what it can.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.utils._pytree as pytree
from harness import machine, write_json
from s1_fit import WORKLOADS, Workload

import tensortorrent as tt

GiB = 1 << 30


def timed(call, device: str, samples: int) -> list[float]:
    """Milliseconds per call, `samples` times after one warm-up, the device drained each time."""

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    with torch.no_grad():
        call()
        sync()
        times = []
        for _ in range(samples):
            start = time.perf_counter()
            call()
            sync()
            times.append((time.perf_counter() - start) * 1e3)
    return times


def summary(times: list[float]) -> dict:
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times), "samples_ms": times}


def logits(output) -> torch.Tensor:
    return (output.logits if hasattr(output, "logits") else output).float().cpu()


def agreement(got: torch.Tensor, expected: torch.Tensor) -> dict:
    got, expected = got.detach().flatten(0, -2), expected.detach().flatten(0, -2)
    cosine = torch.nn.functional.cosine_similarity(got, expected, dim=-1)
    return {
        "cosine_min": float(cosine.min()),
        "argmax_agreement": float((got.argmax(-1) == expected.argmax(-1)).float().mean()),
        "max_abs_error": float((got - expected).abs().max()),
    }


# Inductor compiles each of these cold on the device, and so does torch.compile: S1's
# other two workloads would push the run past its time limit.
COMPILED_WORKLOADS = ("mlp_2048x8", "gpt2_small")


def workloads(quick: bool) -> dict[str, Workload]:
    """S1's workloads, which fit in VRAM."""
    return {name: make(quick) for name, make in WORKLOADS.items()}


def on(device: str, values):
    return pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), values)


def fit_in_vram(device: str, quick: bool, samples: int) -> dict:
    """Models that fit: eager on the device against TensorTorrent on it. TensorTorrent
    takes inputs in RAM and returns outputs there, so eager is timed that way too (inputs
    copied in, outputs copied out: like for like) and with both left on the device."""
    results = {}
    for name, w in workloads(quick).items():
        try:
            compiled = tt.compile(w.model, w.args, example_kwargs=w.kwargs, devices=[device])
            with torch.no_grad():
                expected = logits(w.model(*w.args, **w.kwargs))
                got = logits(compiled(*w.args, **w.kwargs))
            model = w.model.to(device)
            args = on(device, w.args)
            resident = summary(timed(lambda m=model, a=args, k=w.kwargs: m(*a, **k), device, samples))
            eager = summary(
                timed(lambda m=model, a=w.args, k=w.kwargs: on("cpu", m(*on(device, a), **k)), device, samples)
            )
            ours = summary(timed(lambda c=compiled, a=w.args, k=w.kwargs: c(*a, **k), device, samples))
            results[name] = {
                "description": w.description,
                "eager_on_device": eager,
                "eager_on_device_inputs_and_outputs_resident": resident,
                "tensortorrent": ours,
                "ratio_tt_over_eager": ours["median_ms"] / eager["median_ms"],
                "ratio_tt_over_eager_resident": ours["median_ms"] / resident["median_ms"],
                "agreement_with_cpu_eager": agreement(got, expected),
                "region_devices": compiled.region_devices,
                "direct_path": next(x for x in compiled.explain().splitlines() if x.startswith("Direct path")),
            }
            w.model.to("cpu")
        except Exception as error:  # recorded, never dropped
            results[name] = {"failed": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
    return results


def compiled_in_vram(device: str, quick: bool, samples: int, results: dict, save) -> None:
    """Models that fit, compiled: whole-model torch.compile on the device against
    TensorTorrent's regions compiled by inductor for it (issue 15). Compile times are
    recorded: both compile cold where inductor's cache is empty."""
    for name, w in workloads(quick).items():
        if name not in COMPILED_WORKLOADS:
            continue
        model, args, kwargs = w.model, w.args, w.kwargs
        record = results[name] = {}
        stage = "tensortorrent compile"
        try:
            with torch.no_grad():
                expected = logits(model(*args, **kwargs))
            start = time.perf_counter()
            config = tt.CompileConfig(region_backend="inductor")
            compiled = tt.compile(model, args, example_kwargs=kwargs, config=config, devices=[device])
            record["tensortorrent_inductor_compile_s"] = time.perf_counter() - start
            record["tensortorrent_inductor_agreement"] = agreement(logits(compiled(*args, **kwargs)), expected)
            record["tensortorrent_inductor"] = summary(
                timed(lambda c=compiled, a=args, k=kwargs: c(*a, **k), device, samples)
            )
            record["region_backends"] = [x for x in compiled.explain().splitlines() if " on cuda" in x]
            save()
            stage = "torch.compile"
            device_args = on(device, args)
            whole = torch.compile(model.to(device))
            start = time.perf_counter()
            with torch.no_grad():
                whole(*device_args, **kwargs)
            record["torch_compile_first_call_s"] = time.perf_counter() - start
            # Inputs copied in and outputs out, as TensorTorrent's calls do: like for like.
            record["torch_compile"] = summary(
                timed(lambda m=whole, a=args, k=kwargs: on("cpu", m(*on(device, a), **k)), device, samples)
            )
            record["ratio_tt_inductor_over_torch_compile"] = (
                record["tensortorrent_inductor"]["median_ms"] / record["torch_compile"]["median_ms"]
            )
            model.to("cpu")
        except Exception as error:  # recorded, never dropped
            record["failed"] = {"stage": stage, "error": f"{type(error).__name__}: {error}"}
            record["traceback"] = traceback.format_exc()
        save()


def qwen3_decoder(quick: bool, device: str):
    """The Qwen3-8B architecture from its config, random bf16 weights (std 0.02) in RAM,
    without the fp32 initialisation a plain constructor would spend minutes and 32 GB on.
    The values are drawn on `device` where it is a GPU: the CPU's generator draws on one
    thread, about 40 s for 8B values."""
    import transformers

    sizes = (
        dict(hidden_size=256, num_hidden_layers=2, intermediate_size=768, num_attention_heads=8, vocab_size=2048)
        if quick
        else dict(
            hidden_size=4096, num_hidden_layers=36, intermediate_size=12288, num_attention_heads=32, vocab_size=151936
        )
    )
    config = transformers.Qwen3Config(
        num_key_value_heads=8 if not quick else 4,
        head_dim=128 if not quick else 32,
        use_cache=False,
        tie_word_embeddings=False,
        **sizes,
    )
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("meta"):
            model = transformers.Qwen3ForCausalLM(config)
        model = model.to_empty(device="cpu").eval()
    finally:
        torch.set_default_dtype(previous)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.fill_(1.0)
            elif device.startswith("cuda"):
                parameter.copy_(torch.empty_like(parameter, device=device).normal_(0.0, 0.02))
            else:
                parameter.normal_(0.0, 0.02)
        for module in model.modules():
            if hasattr(module, "inv_freq"):  # buffers to_empty left uninitialised
                dim = module.inv_freq.numel() * 2
                base = getattr(config, "rope_theta", 1e6)
                module.inv_freq.copy_(1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)))
                if hasattr(module, "original_inv_freq"):
                    module.original_inv_freq = module.inv_freq.clone()
    return model


def cpu_weight_rate(quick: bool) -> float:
    """Bytes of bf16 weights per second the CPU consumes in a GEMV (best of five)."""
    rows, cols = (768, 256) if quick else (12288, 4096)
    weight, x = torch.randn(rows, cols, dtype=torch.bfloat16), torch.randn(1, cols, dtype=torch.bfloat16)
    best = min(timed(lambda: torch.nn.functional.linear(x, weight), "cpu", 5))
    return weight.numel() * 2 / (best / 1e3)


def beyond_vram(device: str, quick: bool, samples: int, budget: int, results: dict, save) -> None:
    from tensortorrent.hardware.devices import measure_host_to_device_bandwidth

    stage = "model"
    try:
        model = qwen3_decoder(quick, device)
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        ids = torch.randint(0, model.config.vocab_size, (1, 16))
        results.update(weight_bytes=weight_bytes_text(weights), vram_budget_bytes=budget)
        save()
        stage = "reference"
        start = time.perf_counter()
        with torch.no_grad():
            expected = logits(model(ids))
        results["eager_cpu_ms"] = (time.perf_counter() - start) * 1e3
        save()
        stage = "bandwidths"
        results["h2d_bytes_per_s"] = measure_host_to_device_bandwidth(device) if device.startswith("cuda") else None
        results["cpu_gemv_weight_bytes_per_s"] = cpu_weight_rate(quick)
        save()
        stage = "tensortorrent compile"
        start = time.perf_counter()
        config = tt.CompileConfig(vram_budget_bytes=budget)
        compiled = tt.compile(model, (ids,), config=config, devices=sorted({"cpu", device}))
        results["tensortorrent_compile_s"] = time.perf_counter() - start
        results["explain"] = compiled.explain()
        placement = compiled._plan.placement
        chosen = placement.chosen
        resident = sum(
            region.parameter_bytes
            for region, d, r in zip(compiled._regions, chosen.devices, chosen.resident)
            if r and not placement.machine.devices[d].is_cpu
        )
        results["resident_on_device_bytes"] = resident
        save()
        stage = "tensortorrent run"
        results["tensortorrent"] = summary(timed(lambda c=compiled: c(ids), device, samples))
        results["tensortorrent_agreement"] = agreement(logits(compiled(ids)), expected)
        non_resident = weights - resident
        rate = (results["h2d_bytes_per_s"] or 0.0) + results["cpu_gemv_weight_bytes_per_s"]
        results["bound_ms"] = non_resident / rate * 1e3
        results["tensortorrent_over_bound"] = results["tensortorrent"]["median_ms"] / results["bound_ms"]
        save()
        del compiled
        stage = "accelerate"
        from accelerate import dispatch_model, infer_auto_device_map

        if device.startswith("cuda"):
            device_map = infer_auto_device_map(
                model, max_memory={0: budget, "cpu": 200 * GiB}, no_split_module_classes=["Qwen3DecoderLayer"]
            )
        else:  # the smoke run: everything on the CPU
            device_map = {"": "cpu"}
        dispatched = dispatch_model(model, device_map=device_map)
        results["accelerate"] = summary(timed(lambda: dispatched(ids.to(device)), device, samples))
        results["accelerate_agreement"] = agreement(logits(dispatched(ids.to(device))), expected)
        results["accelerate_over_tensortorrent"] = (
            results["accelerate"]["median_ms"] / results["tensortorrent"]["median_ms"]
        )
    except Exception as error:  # recorded, never dropped
        results["failed"] = {
            "stage": stage,
            "error": f"{type(error).__name__}: {error}",
            "traceback": traceback.format_exc(),
        }
    save()


def weight_bytes_text(nbytes: int) -> dict:
    return {"bytes": nbytes, "gib": round(nbytes / GiB, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of the code, not a measurement")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--vram-budget-gib", type=float, default=8.0)
    arguments = parser.parse_args()
    budget = int(arguments.vram_budget_gib * GiB) if not arguments.quick else 1 << 20
    results = {
        "suite": "S4",
        "started": datetime.now(timezone.utc).isoformat(),
        "quick": arguments.quick,
        "machine": machine(),
        "device": arguments.device,
        "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "fit_in_vram": {},
        "beyond_vram": {},
        "fit_in_vram_compiled": {},
    }

    def save() -> None:
        write_json(results, arguments.out)

    # The headline first (a lent GPU's run may be cut short), cold compiles last.
    beyond_vram(arguments.device, arguments.quick, arguments.samples, budget, results["beyond_vram"], save)
    results["fit_in_vram"] = fit_in_vram(arguments.device, arguments.quick, arguments.samples)
    save()
    compiled_in_vram(arguments.device, arguments.quick, arguments.samples, results["fit_in_vram_compiled"], save)
    print(f"results: {arguments.out}")
    failed = failures(results)
    for where, error in failed:
        print(f"failed: {where}: {error}", file=sys.stderr)
    sys.exit(1 if failed else 0)


def failures(results: dict) -> list[tuple[str, object]]:
    """(where, what) of every part of the run recorded as failed: the exit status says so."""
    parts = {"beyond_vram": results["beyond_vram"]}
    for suite in ("fit_in_vram", "fit_in_vram_compiled"):
        parts.update((f"{suite}.{name}", workload) for name, workload in results[suite].items())
    return [(where, part["failed"]) for where, part in parts.items() if "failed" in part]


if __name__ == "__main__":
    main()
