"""The compressed-weights table of docs/benchmarks.md: int8 beside float32 and Accelerate on
the S2 workloads, from bench/compressed.py's latest run."""

from __future__ import annotations

from table_format import code, duration, machine_line, size, table

TITLE = "Compressed weights"
NAMES = {
    "eager": "eager float32, all in RAM",
    "float32": "TensorTorrent float32, streamed",
    "accelerate": "Accelerate disk offload, float32",
}
for _format in ("int8", "int4"):
    NAMES.update(
        {
            _format: f"TensorTorrent {_format}",
            f"{_format}_streamed": f"TensorTorrent {_format}, streamed",
            f"{_format}_in_ram": f"TensorTorrent {_format}, all in RAM",
        }
    )


def render(data: dict) -> str:
    rows, notes = [], []
    for measured in data["workloads"]:
        name = measured["workload"]["name"]
        sizes = ", ".join(f"{f} {size(figures['bytes'])}" for f, figures in measured["formats"].items())
        model = f"{name} {size(measured['float32_bytes'])} ({sizes})"
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
        for weight_format, figures in measured["formats"].items():
            targets, accelerate = figures["targets"], figures["accelerate_over_this"]
            notes.append(
                f"{name}, {weight_format}: {figures['over_float32_time']:.2f}x float32's time per forward at half "
                f"the float32 weights (target {targets['over_float32_time']}x); streamed, "
                f"{figures['streamed_over_bound']:.2f}x its bound (target {targets['streamed_over_bound']}x)"
                + (f"; Accelerate takes {accelerate:.1f}x its time" if accelerate else "")
                + "."
            )
        notes.append(f"{name}: best plain read {measured['reads']['best_plain_gbps']:.2f} GB/s.")
    header = ["workload", "system", "RAM budget", "per forward", "over its bound", "cosine vs eager", "top-1 vs eager"]
    parts = [f"### {TITLE}", machine_line(data), table(header, rows), "\n\n".join(notes)]
    return "\n\n".join(parts) + "\n"
