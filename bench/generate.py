"""Generation: prefill and decode tokens/s of tt.compile_for_generation against Hugging Face.

A Llama-style model of 0.77 GiB and a Qwen3-MoE of 0.7 GiB (16 experts, 2 per token)
(fp32, random weights, saved as safetensors checkpoints), batch 1, a prompt of PROMPT
tokens, NEW greedy tokens. Every system runs
the same generation; time to first token gives prefill tokens/s (prompt tokens over it),
the rest decode tokens/s (new tokens but the first, over the time after it). Runs are
interleaved (one of each system per round, in a seeded random order), medians reported.

- weights in RAM: Hugging Face's generate (eager, dynamic cache; and with its static cache,
  the forward compiled by torch.compile, its compilation in a warm-up run not timed)
  against TensorTorrent's, with its default regions (eager) and with
  CompileConfig(region_backend="inductor") (each region compiled by inductor: the
  counterpart of the torch.compile row).
- under a RAM budget of half the weights, the page cache of every file read dropped
  before each run: Accelerate (load_checkpoint_and_dispatch, device_map="auto",
  max_memory at the budget, the rest offloaded to a folder) against TensorTorrent
  reading the checkpoint in place (a meta-device model, checkpoint=), and against the
  bound: the bytes a decode step reads from storage (/proc/self/io) over the best plain read
  of the checkpoint measured in the same run (bench/streaming.py's plain_reads). Each
  system runs in a process of its own, in a memory cgroup (bench/memory_cgroup.py) where
  the machine allows one, limited once it is built and has generated once (Accelerate's
  loading holds the whole checkpoint for a while) to the memory it then holds and
  TRANSIENT_BYTES: as in a container the page cache counts, so the weights a budget
  leaves on disk are read from disk on every token. Accelerate also runs without a limit
  ("accelerate_page_cache"), as on a machine whose free RAM caches the offload folder:
  its budget then holds for its weights but not for the page cache.
- the same budget, TensorTorrent reading the int8 checkpoint tt.quantize_checkpoint wrote
  (CompileConfig(weight_format="int8")): decode tokens/s against its float32 run.
- the same budget at batch 1, 4 and 16 (each batch of BATCH_PROMPT-token prompts): decode
  tokens/s of every row together, which streaming amortises over the batch (the Llama).

    python bench/generate.py            # the measurement
    python bench/generate.py --quick    # a tiny model, 2 rounds: a smoke test
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import os
import random
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import safetensors.torch
import torch
import transformers
from harness import ROUND_ORDER_SEED, drop_page_cache, machine, write_results
from memory_cgroup import anonymous_bytes, join, limit, memory_cgroup, peak_bytes
from streaming import plain_reads

import tensortorrent as tt

PROMPT, NEW, ROUNDS = 64, 32, 3
BATCHES, QUICK_BATCHES, BATCH_ROUNDS = (1, 4, 16), (1, 2), 2
READ_BYTES, READ_ROUNDS, BLOCK = 1 << 30, 3, 4096  # of the checkpoint's largest file, for the bound
# A budgeted process's memory limit beyond what it holds once built and warm: room for
# what a generation allocates and frees (activations, a layer's weights read from disk).
TRANSIENT_BYTES = 256 << 20


MODELS = {"llama": transformers.LlamaForCausalLM, "qwen3_moe": transformers.Qwen3MoeForCausalLM}


SIZES = {  # (model, quick) -> its config's sizes
    ("llama", False): dict(num_hidden_layers=12, hidden_size=1024, intermediate_size=2816),
    ("llama", True): dict(num_hidden_layers=2, hidden_size=128, intermediate_size=352),
    ("qwen3_moe", False): dict(
        num_hidden_layers=6, hidden_size=1024, head_dim=128, num_experts=16, moe_intermediate_size=384
    ),
    ("qwen3_moe", True): dict(
        num_hidden_layers=2, hidden_size=128, head_dim=16, num_experts=4, moe_intermediate_size=64
    ),
}


def config(name: str, quick: bool):
    """Model `name`'s config: bench sizes, or tiny ones with `quick`."""
    common = dict(
        num_attention_heads=8, num_key_value_heads=4, vocab_size=1024 if quick else 32000, max_position_embeddings=256
    )
    sizes = SIZES[(name, quick)]
    if name == "llama":
        return transformers.LlamaConfig(**common, **sizes)
    moe = dict(num_experts_per_tok=2, intermediate_size=4 * sizes["moe_intermediate_size"])
    return transformers.Qwen3MoeConfig(**common, **moe, **sizes)


def new_model(name: str, quick: bool, device: str | None = None):
    """Model `name` with random weights (none, on the meta device), generating all NEW tokens
    every time: no end token stops it early."""
    with torch.device(device) if device else contextlib.nullcontext():
        model = MODELS[name](config(name, quick))
    model.generation_config.eos_token_id = None
    return model.eval()


def storage_read_bytes() -> int:
    """The bytes this process has had read from storage (/proc/self/io: its reads through
    the page cache, O_DIRECT reads and the page faults of its file mappings alike)."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("read_bytes:"))


class Clock:
    """A streamer (put/end, as Hugging Face's generate tells one) that notes when the first
    new token came, and the bytes read from storage after it."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.puts, self.first, self.end_s = 0, None, None
        self.read_at_first, self.read_at_end = 0, 0

    def put(self, _tokens) -> None:
        self.puts += 1
        if self.puts == 2:  # the first put is the prompt
            self.first = time.perf_counter()
            self.read_at_first = storage_read_bytes()

    def end(self) -> None:
        self.end_s = time.perf_counter()
        self.read_at_end = storage_read_bytes()

    def rates(self, prompt: int, new: int, rows: int) -> dict:
        """Tokens/s of every row together, and the bytes a decode step read from storage."""
        first, total = self.first - self.start, self.end_s - self.start
        decode = rows * (new - 1) / (total - first)
        step_bytes = (self.read_at_end - self.read_at_first) / (new - 1)
        return {
            "ttft_s": first,
            "total_s": total,
            "prefill_tok_s": rows * prompt / first,
            "decode_tok_s": decode,
            "decode_step_storage_bytes": step_bytes,
        }


def timed(generate, rows: int = 1) -> dict:
    clock = Clock()
    with torch.no_grad():
        generate(clock)
    return clock.rates(PROMPT, NEW, rows)


def hugging_face(model, ids):
    def run(clock):
        mask = torch.ones_like(ids)
        model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, streamer=clock)

    return run


def hugging_face_compiled(model, ids):
    """Hugging Face's generate with its static cache and the forward under torch.compile
    (which transformers does on the CPU only when its compile config allows every device)."""
    compile_config = transformers.CompileConfig(fullgraph=True, mode="default")
    compile_config._compile_all_devices = True

    def run(clock):
        mask = torch.ones_like(ids)
        model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=NEW,
            do_sample=False,
            streamer=clock,
            cache_implementation="static",
            compile_config=compile_config,
        )

    return run


def ours(generative, ids):
    return lambda clock: generative.generate(ids, max_new_tokens=NEW, streamer=clock)


def measured(run, rows: int = 1) -> Callable[[], dict]:
    """A measurement of `run` (given a Clock) in this process."""
    return lambda: timed(run, rows)


@dataclass
class BudgetedSystem:
    """A system built under the budget in a worker process: how to run it, its tokens for
    the prompt, and figures of its own (per run, and once built)."""

    run: Callable
    tokens: Callable[[], torch.Tensor]
    figures: Callable[[], dict] = dict
    built: dict = field(default_factory=dict)


def accelerate_system(name: str, checkpoint: str, offload: str, budget: int, quick: bool, ids) -> BudgetedSystem:
    from accelerate import init_empty_weights, load_checkpoint_and_dispatch

    with init_empty_weights():
        empty = new_model(name, quick)
    model = load_checkpoint_and_dispatch(
        empty,
        checkpoint,
        device_map="auto",
        max_memory={"cpu": budget},
        offload_folder=offload,
        no_split_module_classes=empty._no_split_modules,
    ).eval()
    mask = torch.ones_like(ids)
    return BudgetedSystem(
        run=hugging_face(model, ids),
        tokens=lambda: model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False),
    )


def ours_system(
    name: str, checkpoint: str, offload: str, budget: int, quick: bool, ids, weight_format: str | None = None
) -> BudgetedSystem:
    """TensorTorrent reading the checkpoint in place (a meta-device model); with
    `weight_format`, the checkpoint tt.quantize_checkpoint wrote in it."""
    streamed = tt.compile_for_generation(
        new_model(name, quick, "meta"),
        max_length=PROMPT + NEW,
        prompt_buckets=[PROMPT],
        checkpoint=checkpoint,
        devices="cpu",
        config=tt.CompileConfig(ram_budget_bytes=budget, weight_format=weight_format),
    )
    return BudgetedSystem(
        run=ours(streamed, ids),
        tokens=lambda: streamed.generate(ids, max_new_tokens=NEW),
        # The last decode step's reads, from its program's last call.
        figures=lambda: {"decode_step_read_bytes": streamed.programs[1].last_report.bytes_read},
        built={"shared_resident_bytes": streamed.shared_weight_bytes},
    )


SYSTEMS = {
    "accelerate": accelerate_system,
    "tensortorrent": ours_system,
    "tensortorrent_int8": functools.partial(ours_system, weight_format="int8"),
}


def budgeted_worker(connection, system_name: str, group, *build) -> None:
    """A worker process's life: joins `group` (its imports stay outside it), builds the
    system, sends its tokens, then times one generation per "run" until "stop"."""
    try:
        if group is not None:
            join(group)
        start = time.perf_counter()
        system = SYSTEMS[system_name](*build)
        with torch.no_grad():
            tokens = system.tokens()
        connection.send(("ready", {"build_s": time.perf_counter() - start, "tokens": tokens, **system.built}))
        while connection.recv() == "run":
            connection.send(("ran", {**timed(system.run), **system.figures()}))
    except BaseException:
        connection.send(("error", traceback.format_exc()))


class WorkerDied(RuntimeError):
    """A worker process ended while it ran a system (killed by its memory limit, say)."""


class Worker:
    """A budgeted system in a process of its own (bench/memory_cgroup.py's `group` when given).
    It starts building at once; `wait_ready` waits until it is built."""

    def __init__(self, name: str, system: str, group, *build) -> None:
        context = multiprocessing.get_context("spawn")
        self.name = name
        self.connection, theirs = context.Pipe()
        self.process = context.Process(target=budgeted_worker, args=(theirs, system, group, *build), daemon=True)
        self.process.start()
        theirs.close()
        self.ready: dict = {}

    def wait_ready(self) -> None:
        if not self.ready:
            self.ready = self._answer()

    def run(self) -> dict:
        self.connection.send("run")
        return self._answer()

    def stop(self) -> None:
        """Ends the process (asked to, else terminated), so that its cgroup can go."""
        if self.process.is_alive():
            try:
                self.connection.send("stop")
            except OSError:
                pass
            self.process.join(timeout=60)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()

    def _answer(self):
        try:
            kind, value = self.connection.recv()
        except EOFError:
            self.process.join()
            raise WorkerDied(
                f"the {self.name} worker ended (exit code {self.process.exitcode}): killed by its memory limit?"
            ) from None
        if kind == "error":
            self.process.join()
            raise RuntimeError(f"the {self.name} worker failed:\n{value}")
        return value


def interleaved(systems: dict[str, Callable[[], dict]], rounds: int, before=None) -> dict:
    """Each system's runs (a call measures one), one per round in a seeded random order,
    and their medians. A worker that dies (WorkerDied: its memory limit) is recorded with
    its error and the runs it finished, and runs no more."""
    order = random.Random(ROUND_ORDER_SEED)
    runs: dict[str, list] = {name: [] for name in systems}
    errors: dict[str, str] = {}
    for _ in range(rounds):
        names = [name for name in systems if name not in errors]
        order.shuffle(names)
        for name in names:
            if before is not None:
                before()
            try:
                runs[name].append(systems[name]())
            except WorkerDied as error:
                errors[name] = str(error)
                print(f"  {name:<14} {error}", flush=True)
    return {
        name: {"error": errors[name], "runs": samples}
        if name in errors
        else {**{key: statistics.median(run[key] for run in samples) for key in samples[0]}, "runs": samples}
        for name, samples in runs.items()
    }


def weight_files(folder: str) -> list[str]:
    return [str(path) for path in Path(folder).rglob("*") if path.is_file()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny models, 2 rounds: a smoke test")
    parser.add_argument("--out", type=Path, help="write the results here instead of bench/results/")
    options = parser.parse_args()
    started = datetime.now(timezone.utc)
    results = measure("llama", options.quick, with_batches=True)
    results["mixture_of_experts"] = measure("qwen3_moe", options.quick, with_batches=False)
    results.update(
        suite="generate",
        mode="quick" if options.quick else "full",
        utc=started.isoformat(timespec="seconds"),
        machine=machine(),
    )
    for path in write_results("generate", results, started, options.out):
        print(f"wrote {path}")


def measure(name: str, quick: bool, with_batches: bool) -> dict:
    """Model `name`'s figures: weights in RAM, under the budget, and (`with_batches`) its batches."""
    rounds = 2 if quick else ROUNDS
    torch.manual_seed(0)
    model = new_model(name, quick)
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    ids = torch.randint(0, model.config.vocab_size, (1, PROMPT))
    buckets = [PROMPT]
    workload = {"model": name, "weights_bytes": weights, "prompt_tokens": PROMPT, "new_tokens": NEW, "batch": 1}
    results = {"workload": workload}

    print(f"== {name}, weights in RAM ({weights / 2**30:.2f} GiB)", flush=True)
    start = time.perf_counter()
    generative = tt.compile_for_generation(model, max_length=PROMPT + NEW, prompt_buckets=buckets, devices="cpu")
    compile_s = time.perf_counter() - start
    with torch.no_grad():
        reference = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False)
    assert torch.equal(generative.generate(ids, max_new_tokens=NEW), reference), "tokens differ"
    compiled = hugging_face_compiled(model, ids)
    start = time.perf_counter()
    timed(compiled)  # torch.compile compiles on this first run
    compiled_warm_up_s = time.perf_counter() - start
    start = time.perf_counter()
    inductor = tt.compile_for_generation(
        model,
        max_length=PROMPT + NEW,
        prompt_buckets=buckets,
        devices="cpu",
        config=tt.CompileConfig(region_backend="inductor"),
    )
    inductor_compile_s = time.perf_counter() - start
    # Inductor's kernels round otherwise: its tokens are recorded, not asserted.
    inductor_tokens_equal = torch.equal(inductor.generate(ids, max_new_tokens=NEW), reference)
    systems = {"hugging_face": hugging_face(model, ids), "hugging_face_compiled": compiled}
    systems["tensortorrent_inductor"] = ours(inductor, ids)
    systems["tensortorrent"] = ours(generative, ids)
    in_ram = interleaved({system: measured(run) for system, run in systems.items()}, rounds)
    in_ram["tensortorrent_inductor"].update(compile_s=inductor_compile_s, tokens_equal=inductor_tokens_equal)
    results["in_ram"] = {"compile_s": compile_s, "hugging_face_compiled_warm_up_s": compiled_warm_up_s, **in_ram}
    generative.close()
    inductor.close()
    report(in_ram)

    budget = weights // 2
    print(f"== {name}, under a RAM budget of {budget / 2**30:.2f} GiB, page cache dropped", flush=True)
    with tempfile.TemporaryDirectory(prefix="tt-bench-generate-") as scratch:
        checkpoint = os.path.join(scratch, "checkpoint")
        save_state_dict(model, checkpoint)
        del model
        # The same weights with the linear layers int8, written once (the folder holds no
        # config.json: the model says which tensors are linear layers).
        int8_checkpoint = os.path.join(scratch, "checkpoint-int8")
        tt.quantize_checkpoint(checkpoint, int8_checkpoint, model=new_model(name, quick, "meta"))
        offloads = os.path.join(scratch, "offload")  # a folder per Accelerate worker: each writes its own
        workers = {}
        with (
            memory_cgroup("accelerate") as accelerate_group,
            memory_cgroup("ours") as ours_group,
            memory_cgroup("ours-int8") as int8_group,
        ):
            # worker -> (system, cgroup); a worker without a cgroup runs unlimited
            plan = {
                "accelerate": ("accelerate", accelerate_group),
                "accelerate_page_cache": ("accelerate", None),
                "tensortorrent": ("tensortorrent", ours_group),
                "tensortorrent_int8": ("tensortorrent_int8", int8_group),
            }
            if accelerate_group is None:  # no cgroup here: Accelerate runs once, unlimited
                del plan["accelerate_page_cache"]
            limits = {}
            try:
                for worker, (system, group) in plan.items():
                    offload = os.path.join(offloads, worker)
                    source = int8_checkpoint if system == "tensortorrent_int8" else checkpoint
                    workers[worker] = Worker(worker, system, group, name, source, offload, budget, quick, ids)
                    # A quick run builds its workers side by side (most of a tiny model's build
                    # is its process importing torch); a full one builds each alone, timed alone.
                    if not quick:
                        workers[worker].wait_ready()
                for worker, (_, group) in plan.items():
                    workers[worker].wait_ready()
                    if group is not None:
                        limits[worker] = anonymous_bytes(group), anonymous_bytes(group) + TRANSIENT_BYTES
                        limit(group, limits[worker][1])
                assert torch.equal(workers["tensortorrent"].ready["tokens"], reference), "tokens differ"
                files = weight_files(checkpoint) + weight_files(int8_checkpoint) + weight_files(offloads)
                budgeted = interleaved(
                    {worker: process.run for worker, process in workers.items()},
                    rounds,
                    before=lambda: drop_page_cache(files),
                )
            finally:
                for process in workers.values():
                    process.stop()
            for worker, process in workers.items():
                held, limit_bytes = limits.get(worker, (None, None))
                group = plan[worker][1]
                budgeted[worker].update(
                    {key: value for key, value in process.ready.items() if key != "tokens"},
                    held_bytes=held,
                    memory_limit_bytes=limit_bytes,
                    peak_bytes=peak_bytes(group) if group is not None else None,
                )
        # What a decode step reads from storage: through the I/O engine, and the pages of
        # the weights it gathers from (mapped) that were not in the page cache.
        step_bytes = round(budgeted["tensortorrent"]["decode_step_storage_bytes"])
        largest = max(weight_files(checkpoint), key=os.path.getsize)
        # The file's head, up to READ_BYTES, in whole 4 KiB blocks (as O_DIRECT reads).
        size = min(READ_BYTES, os.path.getsize(largest)) // BLOCK * BLOCK
        reads = plain_reads(largest, size, 2 if quick else READ_ROUNDS)
        bound_s = step_bytes / (reads["best_plain_gbps"] * 1e9)
        ours_s = 1 / budgeted["tensortorrent"]["decode_tok_s"]
        int8 = budgeted["tensortorrent_int8"]
        results["under_budget"] = {
            "budget_bytes": budget,
            **budgeted,
            # int8's decode tokens/s over float32's, both TensorTorrent under the budget
            "int8_over_float32_decode": (
                int8["decode_tok_s"] / budgeted["tensortorrent"]["decode_tok_s"] if "error" not in int8 else None
            ),
            "bound": {
                "decode_step_read_bytes": step_bytes,
                "best_plain": reads["best_plain"],
                "best_plain_gbps": reads["best_plain_gbps"],
                "decode_step_s": bound_s,
                # None: a step read nothing from storage (what it gathers was in the page cache)
                "tensortorrent_over_bound": ours_s / bound_s if bound_s > 0 else None,
            },
        }
        report(budgeted)
        print(
            f"  bound          a decode step reads {step_bytes / 2**20:.0f} MiB, best plain read "
            f"{reads['best_plain_gbps']:.2f} GB/s: {bound_s * 1e3:.0f} ms; ours {ours_s * 1e3:.0f} ms "
            + (f"= {ours_s / bound_s:.2f}x the bound" if bound_s > 0 else "(no disk bound)"),
            flush=True,
        )
        if with_batches:
            sizes = QUICK_BATCHES if quick else BATCHES
            meta = new_model(name, quick, "meta")
            results["batches"] = batches(meta, checkpoint, budget, meta.config.vocab_size, rounds, sizes)
    return results


def save_state_dict(model, folder: str) -> None:
    """The model's state dict as one safetensors file, its keys as the model names them.
    (save_pretrained writes a mixture of experts' stacked experts one expert per key, which
    only from_pretrained's conversion reads back.)"""
    os.makedirs(folder)
    tensors = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    safetensors.torch.save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})


def batches(meta, checkpoint: str, budget: int, vocab: int, rounds: int, sizes: tuple[int, ...]) -> dict:
    """Decode and prefill tokens/s (every row together) at each batch of `sizes`, under
    `budget`, the page cache dropped before each run; and how close the largest batch
    comes to that many times batch 1's decode tokens/s. A batch whose activations do not
    fit the budget is recorded with the error."""
    print(f"== batches {', '.join(map(str, sizes))} under the same budget", flush=True)
    by_batch = {}
    for rows in sizes:
        try:
            generative = tt.compile_for_generation(
                meta,
                max_length=PROMPT + NEW,
                batch_size=rows,
                prompt_buckets=[PROMPT],
                checkpoint=checkpoint,
                devices="cpu",
                config=tt.CompileConfig(ram_budget_bytes=budget),
            )
        except tt.MemoryCapacityError as error:
            by_batch[str(rows)] = {"error": str(error)}
            print(f"  batch {rows:<3}      does not fit the budget: {error}", flush=True)
            continue
        ids = torch.randint(0, vocab, (rows, PROMPT))
        runs = interleaved(
            {"tensortorrent": measured(ours(generative, ids), rows)},
            min(rounds, BATCH_ROUNDS),
            before=lambda: drop_page_cache(weight_files(checkpoint)),
        )["tensortorrent"]
        generative.close()
        by_batch[str(rows)] = runs
        prefill, decode = runs["prefill_tok_s"], runs["decode_tok_s"]
        print(f"  batch {rows:<3}      prefill {prefill:8.1f} tok/s   decode {decode:7.2f} tok/s", flush=True)
    largest, single = by_batch[str(sizes[-1])], by_batch[str(sizes[0])]
    if "decode_tok_s" in largest and "decode_tok_s" in single:
        scaling = largest["decode_tok_s"] / (sizes[-1] * single["decode_tok_s"])
        by_batch["largest_over_ideal"] = scaling
        print(f"  batch {sizes[-1]} decodes {scaling:.2f}x of {sizes[-1]} times batch 1's tokens/s", flush=True)
    return by_batch


def report(systems: dict) -> None:
    for name, figures in systems.items():
        if "error" in figures:
            print(f"  {name:<14} {figures['error']}", flush=True)
            continue
        print(
            f"  {name:<14} prefill {figures['prefill_tok_s']:8.1f} tok/s   decode {figures['decode_tok_s']:7.2f} tok/s",
            flush=True,
        )


if __name__ == "__main__":
    main()
