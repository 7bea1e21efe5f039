"""The generation table of docs/benchmarks.md: prefill and decode tokens/s of
tt.compile_for_generation beside Hugging Face's generate (weights in RAM) and Accelerate's
disk offload (under a RAM budget), from bench/generate.py's latest run."""

from __future__ import annotations

from table_format import machine_line, size, table

TITLE = "Generation"
PARTS = (
    ("in_ram", "weights in RAM", ("hugging_face", "hugging_face_compiled", "tensortorrent_inductor")),
    ("under_budget", "RAM budget {budget}", ("accelerate", "accelerate_page_cache", "tensortorrent_int8")),
)
NAMES = {
    "hugging_face": "Hugging Face generate (eager)",
    "hugging_face_compiled": "Hugging Face generate (static cache, torch.compile)",
    "accelerate": "Accelerate disk offload",
    "accelerate_page_cache": "Accelerate disk offload, page cache not limited",
    "tensortorrent_int8": "TensorTorrent int8 (weight_format)",
    "tensortorrent_inductor": "TensorTorrent, inductor regions (region_backend)",
}
MODELS = {"llama": "Llama", "qwen3_moe": "Qwen3-MoE"}


def render(data: dict) -> str:
    models = [data] + ([data["mixture_of_experts"]] if "mixture_of_experts" in data else [])
    rows = [row for measured in models for row in _rows(measured)]
    workload = data["workload"]
    what = (
        f"Batch {workload['batch']}, {workload['prompt_tokens']}-token prompt, {workload['new_tokens']} greedy "
        f"tokens; medians of {len(data['in_ram']['tensortorrent']['runs'])} interleaved rounds."
    )
    header = ["model", "setting", "system", "prefill tok/s", "decode tok/s", "TensorTorrent decode / this"]
    return "\n\n".join([f"### {TITLE}", machine_line(data) + " " + what, table(header, rows), _bound(data)]) + "\n"


def _rows(measured: dict) -> list[list[str]]:
    workload = measured["workload"]
    model = f"{MODELS.get(workload.get('model', 'llama'), workload.get('model'))} {size(workload['weights_bytes'])}"
    rows = []
    for key, setting, baselines in PARTS:
        part = measured[key]
        setting = setting.format(budget=size(part.get("budget_bytes", 0)))
        ours = part["tensortorrent"]
        for name in (n for n in (*baselines, "tensortorrent") if n in part):  # a run without cgroups: one Accelerate
            figures = part[name]
            if "error" in figures:  # its worker died (its memory limit): the table says so
                rows.append([model, setting, NAMES.get(name, "TensorTorrent"), "-", "-", figures["error"]])
                continue
            rows.append(
                [
                    model,
                    setting,
                    NAMES.get(name, "TensorTorrent"),
                    f"{figures['prefill_tok_s']:.1f}",
                    f"{figures['decode_tok_s']:.2f}",
                    f"{ours['decode_tok_s'] / figures['decode_tok_s']:.2f}x" if name != "tensortorrent" else "",
                ]
            )
    return rows


def _bound(data: dict) -> str:
    """The disk's bound on a decode step under the budget, and the batches' decode tokens/s."""
    lines = []
    for measured in [data] + ([data["mixture_of_experts"]] if "mixture_of_experts" in data else []):
        bound = measured["under_budget"]["bound"]
        model = MODELS.get(measured["workload"].get("model", "llama"), "the model")
        ratio, step_ms = bound["tensortorrent_over_bound"], bound["decode_step_s"] * 1e3
        reads = f"Under the budget a decode step of the {model} reads {size(bound['decode_step_read_bytes'])}"
        inductor, in_ram = measured["in_ram"].get("tensortorrent_inductor", {}), measured["in_ram"]
        if "decode_tok_s" in inductor:
            faster = max(in_ram[name]["decode_tok_s"] for name in ("hugging_face", "hugging_face_compiled"))
            lines.append(
                f"In RAM with inductor regions, the {model} decodes {inductor['decode_tok_s'] / faster:.2f}x as fast "
                f"as the faster Hugging Face generate (compiled in {inductor['compile_s']:.0f} s)."
            )
        int8 = measured["under_budget"].get("int8_over_float32_decode")
        if int8 is not None:
            lines.append(f"In int8 (weight_format: linear layers, experts), the {model} decodes {int8:.2f}x as fast.")
        if ratio is None:
            lines.append(
                f"{reads} from storage: what it gathers stayed in the page cache, within its memory cgroup's "
                "limit (the anonymous memory it held when built plus the same headroom as Accelerate's); "
                "no disk bound."
            )
            continue
        lines.append(
            f"{reads}; at the best plain read of its checkpoint in the same run ({bound['best_plain_gbps']:.2f} "
            f"GB/s) that takes {step_ms:.0f} ms: TensorTorrent's step takes {ratio:.2f}x that."
        )
    measured = {rows: figures for rows, figures in data["batches"].items() if isinstance(figures, dict)}
    batches = {rows: figures for rows, figures in measured.items() if "decode_tok_s" in figures}
    if batches:
        each = ", ".join(f"batch {rows}: {figures['decode_tok_s']:.2f}" for rows, figures in batches.items())
        lines.append(f"Decode tokens/s of every row together under the budget (Llama): {each}.")
    if "largest_over_ideal" in data["batches"]:
        largest, scaling = max(int(rows) for rows in batches), data["batches"]["largest_over_ideal"]
        lines.append(f"Batch {largest} decodes {scaling:.2f}x of {largest} times batch 1's tokens/s.")
    return " ".join(lines)
