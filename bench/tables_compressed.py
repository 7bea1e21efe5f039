"""The compressed-weights table of docs/benchmarks.md: int8 beside float32 and Accelerate on
the S2 workloads, from bench/compressed.py's latest run."""

from __future__ import annotations

from table_format import code, duration, machine_line, size, table

TITLE = "Compressed weights"
NAMES = {
    "eager": "eager float32, all in RAM",
    "float32": "TensorTorrent float32, streamed",
    "accelerate": "Accelerate disk offload, float32",
    "int8": "TensorTorrent int8",
    "int8_streamed": "TensorTorrent int8, streamed",
    "int8_in_ram": "TensorTorrent int8, all in RAM",
}


def render(data: dict) -> str:
    rows, notes = [], []
    for measured in data["workloads"]:
        name = measured["workload"]["name"]
        model = f"{name} {size(measured['float32_bytes'])} (int8 {size(measured['int8_bytes'])})"
        for label, result in measured["systems"].items():
            if result["status"] != "ok":
                rows.append([model, NAMES[label], "-", "-", "-", "-", "-"])
                notes.append(f"{name}, {NAMES[label]}: {result['status']}: {code(result['error'])}")
                continue
            budget = size(result["ram_budget_bytes"]) if result.get("ram_budget_bytes") else "none"
            top1 = result.get("top1_agreement_vs_eager")
            rows.append(
                [
                    model,
                    NAMES[label],
                    budget,
                    duration(result["median_s"]),
                    f"{result['over_bound']:.2f}x" if "over_bound" in result else "",
                    f"{result['cosine_vs_eager']:.6f}",
                    f"{top1:.3f}" if top1 is not None else "",
                ]
            )
        accelerate = measured["accelerate_over_int8"]
        notes.append(
            f"{name}: int8 takes {measured['int8_over_float32_time']:.2f}x float32's time per forward at half the "
            f"float32 weights (target 0.35x); streamed, {measured['int8_streamed_over_bound']:.2f}x its bound "
            f"(target 1.2x)"
            + (f"; Accelerate takes {accelerate:.1f}x int8's time" if accelerate else "")
            + f"; best plain read {measured['reads']['best_plain_gbps']:.2f} GB/s. int4: {measured['int4']}."
        )
    header = ["workload", "system", "RAM budget", "per forward", "over its bound", "cosine vs eager", "top-1 vs eager"]
    parts = [f"### {TITLE}", machine_line(data), table(header, rows), "\n\n".join(notes)]
    return "\n\n".join(parts) + "\n"
