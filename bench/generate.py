"""Generation: prefill and decode tokens/s of tt.compile_for_generation against Hugging Face.

A Llama-style model of 0.77 GiB (fp32, random weights, saved as a safetensors
checkpoint), batch 1, a prompt of PROMPT tokens, NEW greedy tokens. Every system runs
the same generation; time to first token gives prefill tokens/s (prompt tokens over it),
the rest decode tokens/s (new tokens but the first, over the time after it). Runs are
interleaved (one of each system per round, in a seeded random order), medians reported.

- weights in RAM: Hugging Face's generate (eager, dynamic cache; and with its static cache,
  the forward compiled by torch.compile, its compilation in a warm-up run not timed)
  against TensorTorrent's.
- under a RAM budget of half the weights, the page cache of every file read dropped
  before each run: Accelerate (load_checkpoint_and_dispatch, device_map="auto",
  max_memory at the budget, the rest offloaded to a folder) against TensorTorrent
  reading the checkpoint in place (a meta-device model, checkpoint=), and against the
  bound: the bytes a decode step reads (its last call's report) over the best plain read
  of the checkpoint measured in the same run (bench/streaming.py's plain_reads).
- the same budget at batch 1, 4 and 16 (each batch of BATCH_PROMPT-token prompts): decode
  tokens/s of every row together, which streaming amortises over the batch.

    python bench/generate.py            # the measurement
    python bench/generate.py --quick    # a tiny model, 2 rounds: a smoke test
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import transformers
from harness import ROUND_ORDER_SEED, drop_page_cache, machine, write_results
from streaming import plain_reads

import tensortorrent as tt

PROMPT, NEW, ROUNDS = 64, 32, 3
BATCHES, QUICK_BATCHES, BATCH_ROUNDS = (1, 4, 16), (1, 2), 2
READ_BYTES, READ_ROUNDS, BLOCK = 1 << 30, 3, 4096  # of the checkpoint's largest file, for the bound


def config(quick: bool) -> transformers.LlamaConfig:
    sizes = (
        dict(num_hidden_layers=2, hidden_size=128, intermediate_size=352, vocab_size=1024)
        if quick
        else dict(num_hidden_layers=12, hidden_size=1024, intermediate_size=2816, vocab_size=32000)
    )
    return transformers.LlamaConfig(num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256, **sizes)


class Clock:
    """A streamer (put/end, as Hugging Face's generate tells one) that notes when the first new token came."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.puts, self.first, self.end_s = 0, None, None

    def put(self, _tokens) -> None:
        self.puts += 1
        if self.puts == 2:  # the first put is the prompt
            self.first = time.perf_counter()

    def end(self) -> None:
        self.end_s = time.perf_counter()

    def rates(self, prompt: int, new: int, rows: int) -> dict:
        """Tokens/s of every row together."""
        first, total = self.first - self.start, self.end_s - self.start
        decode = rows * (new - 1) / (total - first)
        return {"ttft_s": first, "total_s": total, "prefill_tok_s": rows * prompt / first, "decode_tok_s": decode}


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


def interleaved(systems: dict, rounds: int, before=None, rows: int = 1) -> dict:
    """Each system's runs, one per round in a seeded random order, and their medians."""
    order = random.Random(ROUND_ORDER_SEED)
    runs = {name: [] for name in systems}
    for _ in range(rounds):
        names = list(systems)
        order.shuffle(names)
        for name in names:
            if before is not None:
                before()
            runs[name].append(timed(systems[name], rows))
    return {
        name: {
            **{key: statistics.median(run[key] for run in samples) for key in samples[0]},
            "runs": samples,
        }
        for name, samples in runs.items()
    }


def without_end_token(model):
    """`model` generating all NEW tokens every time: no end token stops it early."""
    model.generation_config.eos_token_id = None
    return model


def weight_files(folder: str) -> list[str]:
    return [str(path) for path in Path(folder).rglob("*") if path.is_file()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tiny model, 2 rounds: a smoke test")
    parser.add_argument("--out", type=Path, help="write the results here instead of bench/results/")
    options = parser.parse_args()
    started = datetime.now(timezone.utc)
    rounds = 2 if options.quick else ROUNDS
    torch.manual_seed(0)
    model = without_end_token(transformers.LlamaForCausalLM(config(options.quick)).eval())
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    ids = torch.randint(0, model.config.vocab_size, (1, PROMPT))
    buckets = [PROMPT]
    results = {"workload": {"weights_bytes": weights, "prompt_tokens": PROMPT, "new_tokens": NEW, "batch": 1}}

    print(f"== weights in RAM ({weights / 2**30:.2f} GiB)", flush=True)
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
    systems = {"hugging_face": hugging_face(model, ids), "hugging_face_compiled": compiled}
    in_ram = interleaved({**systems, "tensortorrent": ours(generative, ids)}, rounds)
    results["in_ram"] = {"compile_s": compile_s, "hugging_face_compiled_warm_up_s": compiled_warm_up_s, **in_ram}
    generative.close()
    report(in_ram)

    budget = weights // 2
    print(f"== under a RAM budget of {budget / 2**30:.2f} GiB, page cache dropped", flush=True)
    with tempfile.TemporaryDirectory(prefix="tt-bench-generate-") as scratch:
        checkpoint = os.path.join(scratch, "checkpoint")
        model.save_pretrained(checkpoint)
        del model
        from accelerate import init_empty_weights, load_checkpoint_and_dispatch

        with init_empty_weights():
            offloaded = without_end_token(transformers.LlamaForCausalLM(config(options.quick)))
        offload = os.path.join(scratch, "offload")
        offloaded = load_checkpoint_and_dispatch(
            offloaded,
            checkpoint,
            device_map="auto",
            max_memory={"cpu": budget},
            offload_folder=offload,
            no_split_module_classes=["LlamaDecoderLayer"],
        ).eval()
        with torch.device("meta"):
            meta = transformers.LlamaForCausalLM(config(options.quick))
        start = time.perf_counter()
        streamed = tt.compile_for_generation(
            meta,
            max_length=PROMPT + NEW,
            prompt_buckets=buckets,
            checkpoint=checkpoint,
            devices="cpu",
            config=tt.CompileConfig(ram_budget_bytes=budget),
        )
        compile_s = time.perf_counter() - start
        assert torch.equal(streamed.generate(ids, max_new_tokens=NEW), reference), "tokens differ"
        files = weight_files(checkpoint) + weight_files(offload)
        systems = {"accelerate": hugging_face(offloaded, ids), "tensortorrent": ours(streamed, ids)}
        budgeted = interleaved(systems, rounds, before=lambda: drop_page_cache(files))
        step_bytes = streamed.programs[1].last_report.bytes_read  # the last decode step's reads
        shared = streamed.shared_weight_bytes
        streamed.close()
        del offloaded
        largest = max(weight_files(checkpoint), key=os.path.getsize)
        # The file's head, up to READ_BYTES, in whole 4 KiB blocks (as O_DIRECT reads).
        size = min(READ_BYTES, os.path.getsize(largest)) // BLOCK * BLOCK
        reads = plain_reads(largest, size, 2 if options.quick else READ_ROUNDS)
        bound_s = step_bytes / (reads["best_plain_gbps"] * 1e9)
        ours_s = 1 / budgeted["tensortorrent"]["decode_tok_s"]
        results["under_budget"] = {
            "budget_bytes": budget,
            "compile_s": compile_s,
            "shared_resident_bytes": shared,
            **budgeted,
            "bound": {
                "decode_step_read_bytes": step_bytes,
                "best_plain": reads["best_plain"],
                "best_plain_gbps": reads["best_plain_gbps"],
                "decode_step_s": bound_s,
                "tensortorrent_over_bound": ours_s / bound_s,
            },
        }
        report(budgeted)
        print(
            f"  bound          a decode step reads {step_bytes / 2**20:.0f} MiB, best plain read "
            f"{reads['best_plain_gbps']:.2f} GB/s: {bound_s * 1e3:.0f} ms; ours {ours_s * 1e3:.0f} ms "
            f"= {ours_s / bound_s:.2f}x the bound",
            flush=True,
        )
        sizes = QUICK_BATCHES if options.quick else BATCHES
        meta = meta_model(options.quick)
        results["batches"] = batches(meta, checkpoint, budget, model_vocab(options.quick), rounds, sizes)
    results.update(
        suite="generate",
        mode="quick" if options.quick else "full",
        utc=started.isoformat(timespec="seconds"),
        machine=machine(),
    )
    for path in write_results("generate", results, started, options.out):
        print(f"wrote {path}")


def meta_model(quick: bool):
    with torch.device("meta"):
        return without_end_token(transformers.LlamaForCausalLM(config(quick)))


def model_vocab(quick: bool) -> int:
    return config(quick).vocab_size


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
            {"tensortorrent": ours(generative, ids)},
            min(rounds, BATCH_ROUNDS),
            before=lambda: drop_page_cache(weight_files(checkpoint)),
            rows=rows,
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
        print(
            f"  {name:<14} prefill {figures['prefill_tok_s']:8.1f} tok/s   decode {figures['decode_tok_s']:7.2f} tok/s",
            flush=True,
        )


if __name__ == "__main__":
    main()
