"""One S2 system on one workload, in a process of its own (so that its peak RSS is its own).

    python bench/s2_system.py SYSTEM WORKLOAD CHECKPOINT_DIR BUDGET RUNS SCRATCH [--quick]

SYSTEM: tensortorrent (weights read in place under the RAM budget; BUDGET 0: no
budget given), tensortorrent-int8 and tensortorrent-int4 (the same from a checkpoint
tt.quantize_checkpoint wrote in that weight_format), accelerate
(init_empty_weights + load_checkpoint_and_dispatch, the layers beyond the budget on
"disk"), mmap (eager over memory-mapped safetensors: the OS pages weights in) or eager
(every weight in RAM, timed interleaved with TensorTorrent's own compiled module of the
same weights in RAM, no budget: the faster of the two is the compute floor). The page
cache of every weight file the system
reads (Accelerate's offload folder too) is dropped before each timed forward. Prints one
JSON object: per-forward seconds, peak RSS, bytes TensorTorrent read (and, per forward,
its read speed and the simulator's time at that speed and its compute); saves the output
as SCRATCH/SYSTEM.pt for the caller's parity check.
"""

from __future__ import annotations

import json
import mmap
import os
import sys
import time
import warnings

os.environ.setdefault("TQDM_DISABLE", "1")  # Accelerate's and transformers' progress bars

import torch  # noqa: E402
from harness import drop_page_cache  # noqa: E402
from s2_workloads import weight_files, workloads  # noqa: E402

import tensortorrent as tt  # noqa: E402
from tensortorrent.storage.checkpoint import open_checkpoint  # noqa: E402


def rss_bytes(field: str) -> int:
    status = open("/proc/self/status").read()
    return int(status.split(f"{field}:")[1].split()[0]) * 1024


def with_unsaved_buffers(model: torch.nn.Module) -> torch.nn.Module:
    """A meta Llama's rotary embedding rebuilt on the CPU: checkpoints do not save it."""
    inner = getattr(model, "model", None)
    if inner is not None and hasattr(inner, "rotary_emb"):
        inner.rotary_emb = type(inner.rotary_emb)(config=model.config)
    return model


def checkpoint_tensors(directory: str, mapped: bool) -> tuple[dict[str, torch.Tensor], list[mmap.mmap]]:
    """Every tensor of the checkpoint: views of the files mapped read-only, or copies in RAM."""
    checkpoint = open_checkpoint(directory)
    maps = {}
    for path in checkpoint.files:
        with open(path, "rb") as handle:
            maps[path] = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    tensors = {}
    for name, t in checkpoint.tensors.items():
        count = t.nbytes // torch.empty((), dtype=t.dtype).element_size()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the mapping is read-only, and so are the weights
            view = torch.frombuffer(maps[t.path], dtype=t.dtype, count=count, offset=t.offset).view(t.shape)
        tensors[name] = view if mapped else view.clone()
    if not mapped:
        for mapping in maps.values():
            mapping.close()
        return tensors, []
    return tensors, list(maps.values())


def with_weights(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> torch.nn.Module:
    state = model.state_dict()
    for name in state:  # a tied head is saved once, under the embedding's name
        if name not in tensors and getattr(getattr(model, "config", None), "tie_word_embeddings", False):
            tensors[name] = tensors["model.embed_tokens.weight"]
    model.load_state_dict(tensors, assign=True)
    return with_unsaved_buffers(model).eval()


def build(system: str, workload, directory: str, budget: int, scratch: str):
    """(the model, its forward, what lists the files to drop before each forward, the mappings to drop)."""
    inputs = workload.inputs()
    files = weight_files(directory)
    if system.startswith("tensortorrent"):
        weight_format = system.removeprefix("tensortorrent-") if "-" in system else None
        config = tt.CompileConfig(ram_budget_bytes=budget or None, weight_format=weight_format)
        compiled = tt.compile(workload.meta(), inputs, checkpoint=directory, config=config)
        return compiled, lambda: compiled(*inputs), lambda: files, []
    if system == "accelerate":
        from accelerate import init_empty_weights, load_checkpoint_and_dispatch

        with init_empty_weights():
            model = workload.build()
        offload = os.path.join(scratch, "offload")
        model = load_checkpoint_and_dispatch(
            model,
            directory if workload.vocab else files[0],
            device_map="auto",
            max_memory={"cpu": budget},
            offload_folder=offload,
            no_split_module_classes=[workload.block_class] if workload.block_class else None,
        ).eval()
        return model, lambda: model(*inputs), lambda: files + weight_files(offload), []
    tensors, maps = checkpoint_tensors(directory, mapped=system == "mmap")
    model = with_weights(workload.meta(), tensors)
    return model, lambda: model(*inputs), lambda: files, maps


def main() -> None:
    system, name, directory, budget, runs, scratch = sys.argv[1:7]
    budget, runs = int(budget), int(runs)
    workload = next(w for w in workloads("--quick" in sys.argv) if w.name == name)
    baseline = rss_bytes("VmRSS")
    start = time.perf_counter()
    target, forward, files, maps = build(system, workload, directory, budget, scratch)
    setup_s = time.perf_counter() - start
    # Beside eager: TensorTorrent's own plan of the weights in RAM, which may compute faster
    # (oneDNN, packed weights); the bound's compute floor is the faster of the two.
    in_ram = tt.compile(target, workload.inputs(), devices="cpu") if system == "eager" else None
    times, in_ram_times, reads, read_gbps, predicted_at = [], [], [], [], []
    # TensorTorrent on the data plane (a compile from a checkpoint runs there, streaming or not).
    streamed = system.startswith("tensortorrent") and target._plane is not None
    with torch.no_grad():
        output = forward()  # warm-up
        if in_ram is not None:
            in_ram(*workload.inputs())
        for _ in range(runs):
            drop_page_cache(files(), maps)
            start = time.perf_counter()
            output = forward()
            times.append(time.perf_counter() - start)
            if in_ram is not None:  # interleaved: eager, compiled, eager, compiled
                start = time.perf_counter()
                in_ram(*workload.inputs())
                in_ram_times.append(time.perf_counter() - start)
            if streamed:
                report = target.last_report
                reads.append(report.bytes_read)
                read_gbps.append(report.bytes_read / report.read_us / 1e3 if report.read_us else None)
                predicted_at.append(target._plane.predicted_at(report))
    logits = output if isinstance(output, torch.Tensor) else output["logits"]
    torch.save(logits, os.path.join(scratch, f"{system}.pt"))
    result = {
        "system": system,
        "setup_s": setup_s,
        "forward_s": times,
        "peak_rss_bytes": rss_bytes("VmHWM"),
        "baseline_rss_bytes": baseline,
        "bytes_read_per_forward": reads,
    }
    if in_ram is not None:
        result["compiled_in_ram_forward_s"] = in_ram_times
    if streamed:
        result["predicted_s"] = target._plane.predicted_s()
        # The simulator again at each timed call's own compute times and read speed: the
        # model's error without the disk's drift between compile and call.
        result["predicted_at_call_speed_s"] = predicted_at
        result["read_gbps"] = read_gbps
        result["layout"] = target._plane.layout
        result["prefetch_distance"] = target._plane.plan.prefetch
        result["reads"] = target._plane.reads
    print(json.dumps(result))


if __name__ == "__main__":
    main()
