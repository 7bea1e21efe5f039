"""Suite S1 of ../shared/BENCHMARKS.md: models that fit in memory, on the CPU.

Four workloads (an MLP, a transformer block, GPT-2 small and ResNet-50, random weights),
each run on the same inputs by eager PyTorch, torch.compile (inductor; plain, and with
freezing=True, its strongest CPU setting), ONNX Runtime (CPU provider), and TensorTorrent
with eager, inductor and auto regions. Per system: latency per call (median, min, max), its ratio to
eager's median, its agreement with eager's output, and what building it cost.

    python bench/s1_fit.py                      # the measurement
    python bench/s1_fit.py --quick              # small models, short samples: a smoke test
    python bench/s1_fit.py --quick --systems eager,onnxruntime,tensortorrent --out /tmp/s1.json

Protocol (BENCHMARKS.md): one process, the same inputs and thread count for every system,
a warm-up, then samples interleaved A, B, C, ... (each round starting one system further on).
Each sample is a batch of calls sized to take about 80 ms, reported per call. Besides the
ratio of medians, each system's ratio to eager and to torch.compile is taken per round
(paired), with a 95% confidence interval of its median. A system that is not installed or raises is recorded
as missing or failed with its error; it is never dropped.
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
import importlib.util
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import torch
from harness import Settings, compare, machine, paired_ratio, spread, write_results
from torch import nn

import tensortorrent as tt

FULL = Settings(runs=41, sample_ns=80_000_000, warmup_ns=300_000_000)
QUICK = Settings(runs=5, sample_ns=10_000_000, warmup_ns=20_000_000)
SYSTEMS = (
    "eager",
    "torch_compile",
    "torch_compile_frozen",
    "onnxruntime",
    "tensortorrent",
    "tensortorrent_inductor",
    "tensortorrent_auto",
)
# Each system's samples over these systems' samples of the same round (harness.paired_ratio):
# eager is every ratio's reference, whole-model torch.compile (plain, and frozen: its
# strongest CPU setting) what inductor regions must match.
PAIRED_REFERENCES = ("eager", "torch_compile", "torch_compile_frozen")
ERROR_CHARS = 1000  # an inductor or exporter error can run to pages; the head says what failed


@dataclass
class Workload:
    description: str
    model: nn.Module
    args: tuple[torch.Tensor, ...]
    kwargs: dict = field(default_factory=dict)  # non-tensor options every call passes (use_cache=False)
    language_model: bool = False  # its logits are also compared by cosine and argmax


@dataclass
class Built:
    call: Callable[[], object]  # one forward on the workload's inputs: what is timed
    build_s: float | None = None
    notes: str | None = None


class Missing(Exception):
    """A baseline whose package is not installed: reported "missing", not "failed"."""


class ExportFailed(Exception):
    """Neither ONNX exporter could export the model; the message holds both errors."""


# Workloads. Each seeds torch itself, so its weights and inputs do not depend on the order.


def mlp(quick: bool) -> Workload:
    width, depth = (512, 4) if quick else (2048, 8)
    torch.manual_seed(0)
    model = nn.Sequential(*[layer for _ in range(depth) for layer in (nn.Linear(width, width), nn.ReLU())])
    description = f"{depth} x (Linear({width}, {width}), ReLU), input randn(8, {width})"
    return Workload(description, model.eval(), (torch.randn(8, width),))


def transformer_block(quick: bool) -> Workload:
    d_model, batch, seq = (64, 4, 16) if quick else (256, 8, 32)
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(d_model=d_model, nhead=4, batch_first=True).eval()
    description = (
        f"TransformerEncoderLayer(d_model={d_model}, nhead=4, batch_first=True), eval, input randn{batch, seq, d_model}"
    )
    return Workload(description, model, (torch.randn(batch, seq, d_model),))


def gpt2_small(quick: bool) -> Workload:
    import transformers

    small = dict(n_layer=2, n_embd=128, n_head=4, vocab_size=1024, n_positions=64, bos_token_id=0, eos_token_id=0)
    sizes = small if quick else {}
    seq = 32 if quick else 128
    torch.manual_seed(0)
    config = transformers.GPT2Config(use_cache=False, **sizes)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, seq))
    description = (
        f"GPT2LMHeadModel, random weights ({config.n_layer} layers, n_embd {config.n_embd}, "
        f"vocab {config.vocab_size}), input_ids (1, {seq}), use_cache=False; logits compared"
    )
    return Workload(description, model, (ids,), {"use_cache": False}, language_model=True)


def resnet50(quick: bool) -> Workload:
    import transformers

    sizes = dict(embedding_size=16, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1]) if quick else {}
    side = 32 if quick else 224
    torch.manual_seed(0)
    config = transformers.ResNetConfig(**sizes)
    model = transformers.ResNetForImageClassification(config).eval()
    description = (
        f"ResNetForImageClassification, random weights (depths {list(config.depths)}, hidden sizes "
        f"{config.hidden_sizes}, {config.num_labels} labels), pixel_values randn(1, 3, {side}, {side}); logits compared"
    )
    return Workload(description, model, (torch.randn(1, 3, side, side),))


WORKLOADS = {"mlp_2048x8": mlp, "transformer_block": transformer_block, "gpt2_small": gpt2_small, "resnet50": resnet50}


# Systems. Each builder returns the call to time; an exception is that system's failure.


def build_eager(w: Workload, scratch: Path) -> Built:
    def call():
        with torch.no_grad():
            return w.model(*w.args, **w.kwargs)

    return Built(call)


def build_torch_compile(w: Workload, scratch: Path, frozen: bool = False) -> Built:
    """torch.compile is lazy: the first call compiles, so build_s covers it. `frozen`: with
    inductor's freezing (weights folded in as constants, oneDNN's prepacked convolutions
    and products, batch norm folded), its strongest CPU setting for inference, given as
    the backend's options (a backend of its own, so that dynamo compiles the model again
    rather than reuse the plain compile's graph), on a copy of the model."""
    model = copy.deepcopy(w.model) if frozen else w.model
    compiled = torch.compile(model, options={"freezing": True}) if frozen else torch.compile(model)

    def call():
        with torch.no_grad():
            return compiled(*w.args, **w.kwargs)

    start = time.perf_counter()
    call()
    notes = "inductor with freezing=True, whole model" if frozen else "inductor (default backend), whole model"
    return Built(call, time.perf_counter() - start, notes)


def build_torch_compile_frozen(w: Workload, scratch: Path) -> Built:
    return build_torch_compile(w, scratch, frozen=True)


class LogitsOnly(nn.Module):
    """The model as a function of its tensor inputs returning only the logits: what the ONNX graph computes."""

    def __init__(self, model: nn.Module, kwargs: dict) -> None:
        super().__init__()
        self.model, self.kwargs = model, kwargs

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return logits(self.model(*args, **self.kwargs))


def export_onnx(w: Workload, path: Path) -> str:
    """Exports with torch's default exporter (dynamo, which needs onnxscript), else the TorchScript
    one; returns which worked and why the first did not."""
    wrapped = LogitsOnly(w.model, w.kwargs).eval()
    names = dict(input_names=[f"input_{i}" for i in range(len(w.args))], output_names=["logits"])
    try:
        torch.onnx.export(wrapped, w.args, str(path), dynamo=True, **names)
        return "dynamo exporter (dynamo=True)"
    except Exception as error:
        dynamo_error = describe(error)
    try:
        with warnings.catch_warnings():  # that it is the legacy exporter is recorded in the notes
            warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*legacy TorchScript-based")
            torch.onnx.export(wrapped, w.args, str(path), dynamo=False, **names)
    except Exception as error:
        raise ExportFailed(f"dynamo exporter: {dynamo_error}; TorchScript exporter: {describe(error)}") from error
    return f"TorchScript exporter (dynamo=False); the dynamo exporter failed: {dynamo_error}"


def build_onnxruntime(w: Workload, scratch: Path) -> Built:
    if importlib.util.find_spec("onnxruntime") is None:
        raise Missing("onnxruntime is not installed (pip install '.[bench]')")
    import onnxruntime

    path = scratch / "model.onnx"
    start = time.perf_counter()
    exporter = export_onnx(w, path)
    exported = time.perf_counter()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()  # the same threads as every other system
    # Its threads otherwise spin for a while after each run, taking the cores from the
    # system timed next in the interleaving (seen here: that system 1.1-1.6x slower).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    done = time.perf_counter()
    feeds = {i.name: arg.numpy() for i, arg in zip(session.get_inputs(), w.args)}
    notes = f"{exporter}; export {exported - start:.2f} s, session {done - exported:.2f} s"
    return Built(lambda: session.run(None, feeds), done - start, notes)


def build_tensortorrent(w: Workload, scratch: Path, config: tt.CompileConfig | None = None) -> Built:
    start = time.perf_counter()
    compiled = tt.compile(w.model, example_inputs=w.args, example_kwargs=w.kwargs, config=config, devices="cpu")
    build_s = time.perf_counter() - start
    path = "direct path" if compiled.uses_direct_path else "executor"
    return Built(lambda: compiled(*w.args, **w.kwargs), build_s, f"{compiled.region_count} region(s), {path}")


def build_tensortorrent_inductor(w: Workload, scratch: Path) -> Built:
    return build_tensortorrent(w, scratch, tt.CompileConfig(region_backend="inductor"))


def build_tensortorrent_auto(w: Workload, scratch: Path) -> Built:
    return build_tensortorrent(w, scratch, tt.CompileConfig(region_backend="auto"))


BUILDERS = {
    "eager": build_eager,
    "torch_compile": build_torch_compile,
    "torch_compile_frozen": build_torch_compile_frozen,
    "onnxruntime": build_onnxruntime,
    "tensortorrent": build_tensortorrent,
    "tensortorrent_inductor": build_tensortorrent_inductor,
    "tensortorrent_auto": build_tensortorrent_auto,
}


def logits(output) -> torch.Tensor:
    """The tensor compared between systems: a transformers output's logits, ONNX Runtime's first output."""
    if hasattr(output, "logits"):
        return output.logits
    if isinstance(output, list):
        return torch.from_numpy(output[0])
    return output


def agreement(got: torch.Tensor, expected: torch.Tensor, language_model: bool) -> dict:
    """Max abs error against eager; for a language model also the lowest cosine similarity of a
    position's logits and the share of positions whose argmax (next token) agrees."""
    if got.shape != expected.shape:
        raise ValueError(f"output shape {tuple(got.shape)}, eager's {tuple(expected.shape)}")
    got, expected = got.detach().float(), expected.detach().float()
    result = {"max_abs_error": (got - expected).abs().max().item(), "cosine": None, "argmax_agreement": None}
    if language_model:
        rows, reference = got.flatten(0, -2), expected.flatten(0, -2)
        result["cosine"] = nn.functional.cosine_similarity(rows, reference, dim=-1).min().item()
        result["argmax_agreement"] = (rows.argmax(-1) == reference.argmax(-1)).float().mean().item()
    return result


def describe(error: Exception) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + " ..."


def not_ok(error: Exception) -> dict:
    if isinstance(error, Missing):
        return {"status": "missing", "error": str(error)}
    return {"status": "failed", "error": describe(error)}


def bench_workload(w: Workload, systems: tuple[str, ...], settings: Settings) -> dict:
    """Builds every system, checks each output against eager's, then times them interleaved.
    Eager is the reference: if it fails, the workload itself is broken and the run stops."""
    expected = logits(build_eager(w, Path()).call())  # again below, as the system timed against
    built, checked, errors = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="s1-") as scratch:
        for system in systems:
            try:
                built[system] = BUILDERS[system](w, Path(scratch))
                checked[system] = agreement(logits(built[system].call()), expected, w.language_model)
            except Exception as error:  # recorded, never dropped
                errors[system] = error
                built.pop(system, None)
        timings = compare({system: b.call for system, b in built.items()}, settings, errors)
    eager_us = timings["eager"]["median_us"]
    results = {}
    for system in SYSTEMS:
        if system not in systems:
            results[system] = {"status": "skipped", "error": "not selected with --systems"}
        elif system in errors:
            results[system] = not_ok(errors[system])
        else:
            b, timing = built[system], timings[system]
            ratio = timing["median_us"] / eager_us
            results[system] = {
                "status": "ok",
                "timing": timing,
                "ratio_to_eager": ratio,
                "paired_ratios": {
                    reference: paired_ratio(timing["samples_us"], timings[reference]["samples_us"])
                    for reference in PAIRED_REFERENCES
                    if reference in timings and reference != system
                },
                **checked[system],
                "build_s": b.build_s,
                "notes": b.notes,
            }
    return {"description": w.description, "input_shape": list(w.args[0].shape), "systems": results}


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict:
    return {
        "torch": torch.__version__,
        "tensortorrent": tt.__version__,
        "transformers": version("transformers"),
        "onnxruntime": version("onnxruntime"),
        "onnx": version("onnx"),
        "onnxscript": version("onnxscript"),
    }


def print_table(results: dict) -> None:
    print(f"\nS1 fits in memory (CPU), {results['mode']} mode, {results['torch_threads']} torch threads")
    print("us/call median (min-max); ratio of medians to eager; agreement with eager; build seconds")
    header = f"  {'workload':18} {'system':23} {'us/call':>30} {'ratio':>7} {'max err':>9} {'cosine':>8} {'argmax':>7}"
    print(header + f" {'build s':>8}  notes")
    for name, workload in results["workloads"].items():
        for system, r in workload["systems"].items():
            if r["status"] != "ok":
                print(f"  {name:18} {system:23} {r['status'].upper()}: {r['error'][:150]}")
                continue
            cosine = "-" if r["cosine"] is None else f"{r['cosine']:.6f}"
            argmax = "-" if r["argmax_agreement"] is None else f"{r['argmax_agreement']:.3f}"
            build = "-" if r["build_s"] is None else f"{r['build_s']:.2f}"
            print(
                f"  {name:18} {system:23} {spread(r['timing']):>30} {r['ratio_to_eager']:7.3f} "
                f"{r['max_abs_error']:9.2g} {cosine:>8} {argmax:>7} {build:>8}  {(r['notes'] or '')[:110]}"
            )


def selected_systems(text: str) -> tuple[str, ...]:
    """--systems: a comma-separated subset of SYSTEMS; eager always runs, as every ratio's reference."""
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = names - set(SYSTEMS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown systems {sorted(unknown)}; choose from {', '.join(SYSTEMS)}")
    return tuple(system for system in SYSTEMS if system in names | {"eager"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small models, short samples (a smoke test)")
    parser.add_argument("--out", type=Path, help="write the JSON here only, instead of bench/results/")
    parser.add_argument("--systems", type=selected_systems, default=SYSTEMS, help="comma-separated (default: all)")
    args = parser.parse_args()
    settings = QUICK if args.quick else FULL
    started, start_ns = datetime.now(timezone.utc), time.perf_counter_ns()
    results = {
        "suite": "S1",
        "benchmark": "s1_fit",
        "mode": "quick" if args.quick else "full",
        "utc": started.isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "torch_threads": torch.get_num_threads(),
        "settings": {
            "runs": settings.runs,
            "sample_ms": settings.sample_ns / 1e6,
            "warmup_ms": settings.warmup_ns / 1e6,
        },
        "workloads": {
            name: bench_workload(make(args.quick), args.systems, settings) for name, make in WORKLOADS.items()
        },
    }
    results["duration_s"] = (time.perf_counter_ns() - start_ns) / 1e9
    print_table(results)
    paths = write_results("s1", results, started, args.out)
    print(f"results: {', '.join(str(p) for p in paths)} ({results['duration_s']:.0f} s)")


if __name__ == "__main__":
    main()
