"""The generation table of docs/benchmarks.md: prefill and decode tokens/s of
tt.compile_for_generation beside Hugging Face's generate (weights in RAM) and Accelerate's
disk offload (under a RAM budget), from bench/generate.py's latest run."""

from __future__ import annotations

from table_format import machine_line, size, table

TITLE = "Generation"
PARTS = (("in_ram", "weights in RAM", "hugging_face"), ("under_budget", "RAM budget {budget}", "accelerate"))
NAMES = {"hugging_face": "Hugging Face generate (eager)", "accelerate": "Accelerate disk offload"}


def render(data: dict) -> str:
    workload = data["workload"]
    rows = []
    for key, setting, baseline in PARTS:
        part = data[key]
        setting = setting.format(budget=size(part.get("budget_bytes", 0)))
        ours = part["tensortorrent"]
        for name in (baseline, "tensortorrent"):
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
    return "\n\n".join([f"### {TITLE}", machine_line(data) + " " + what, table(header, rows)]) + "\n"
