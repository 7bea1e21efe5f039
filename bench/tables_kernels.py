"""The weight-only kernels table of docs/benchmarks.md: one layer's product through
TensorTorrent's int8 and int4 ops, torchao's and float32's, from
bench/weight_only_kernels.py's latest run."""

from __future__ import annotations

from table_format import machine_line, table

TITLE = "Weight-only kernels"


def render(data: dict) -> str:
    by_rows = data["ms_per_product"]
    systems = list(next(iter(by_rows.values())))
    rows = [[rows, *(f"{figures[name]:.2f} ms" for name in systems)] for rows, figures in by_rows.items()]
    out, features = data["layer"]
    note = (
        f"One {out}x{features} layer's product on the CPU, per row count (int4 in groups of "
        f"{data['group_size']}); {data['torchao']}."
    )
    parts = [f"### {TITLE}", machine_line(data), table(["rows", *systems], rows), note]
    return "\n\n".join(parts) + "\n"
