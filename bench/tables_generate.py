"""The generation table of docs/benchmarks.md: prefill and decode tokens/s of
tt.compile_for_generation beside Hugging Face's generate (weights in RAM) and Accelerate's
disk offload (under a RAM budget), from bench/generate.py's latest run."""

from __future__ import annotations

from table_format import machine_line, size, table

TITLE = "Generation"
PARTS = (
    ("in_ram", "weights in RAM", ("hugging_face", "hugging_face_compiled")),
    ("under_budget", "RAM budget {budget}", ("accelerate",)),
)
NAMES = {
    "hugging_face": "Hugging Face generate (eager)",
    "hugging_face_compiled": "Hugging Face generate (static cache, torch.compile)",
    "accelerate": "Accelerate disk offload",
}


def render(data: dict) -> str:
    workload = data["workload"]
    rows = []
    for key, setting, baselines in PARTS:
        part = data[key]
        setting = setting.format(budget=size(part.get("budget_bytes", 0)))
        ours = part["tensortorrent"]
        for name in (*baselines, "tensortorrent"):
            figures = part[name]
            rows.append(
                [
                    setting,
                    NAMES.get(name, "TensorTorrent"),
                    f"{figures['prefill_tok_s']:.1f}",
                    f"{figures['decode_tok_s']:.2f}",
                    f"{ours['decode_tok_s'] / figures['decode_tok_s']:.2f}x" if name != "tensortorrent" else "",
                ]
            )
    what = (
        f"Llama-style model of {size(workload['weights_bytes'])}, batch {workload['batch']}, "
        f"{workload['prompt_tokens']}-token prompt, {workload['new_tokens']} greedy tokens; medians of "
        f"{len(data['in_ram']['tensortorrent']['runs'])} interleaved rounds."
    )
    header = ["setting", "system", "prefill tok/s", "decode tok/s", "TensorTorrent decode / this"]
    return "\n\n".join([f"### {TITLE}", machine_line(data) + " " + what, table(header, rows), _bound(data)]) + "\n"


def _bound(data: dict) -> str:
    """The disk's bound on a decode step under the budget, and the batches' decode tokens/s."""
    bound = data["under_budget"]["bound"]
    ratio = bound["tensortorrent_over_bound"]
    lines = [
        f"Under the budget a decode step reads {size(bound['decode_step_read_bytes'])}; at the best plain read "
        f"of the checkpoint in the same run ({bound['best_plain_gbps']:.2f} GB/s) that takes "
        f"{bound['decode_step_s'] * 1e3:.0f} ms: TensorTorrent's step takes {ratio:.2f}x that."
    ]
    measured = {rows: figures for rows, figures in data["batches"].items() if isinstance(figures, dict)}
    batches = {rows: figures for rows, figures in measured.items() if "decode_tok_s" in figures}
    if batches:
        each = ", ".join(f"batch {rows}: {figures['decode_tok_s']:.2f}" for rows, figures in batches.items())
        lines.append(f"Decode tokens/s of every row together under the budget: {each}.")
    if "largest_over_ideal" in data["batches"]:
        largest, scaling = max(int(rows) for rows in batches), data["batches"]["largest_over_ideal"]
        lines.append(f"Batch {largest} decodes {scaling:.2f}x of {largest} times batch 1's tokens/s.")
    return " ".join(lines)
