"""The compile-time table of docs/benchmarks.md: tt.compile against torch.export of the same
model, for the latest run and for the earliest full run kept (the baseline it improves on)."""

from __future__ import annotations

from table_format import code, machine_line, spread_s, table

TITLE = "Compile time"


def _rows(data: dict, run: str) -> list[list[str]]:
    rows = []
    for name, result in data["workloads"].items():
        if result.get("status") == "failed":
            rows.append([name, run, "failed", "", ""])
            continue
        export, compiled = result["torch_export"], result["tensortorrent_compile"]
        rows.append(
            [
                name,
                run,
                spread_s(export["median_s"], export["min_s"], export["max_s"]),
                spread_s(compiled["median_s"], compiled["min_s"], compiled["max_s"]),
                f"{result['ratio_of_medians']:.2f}x",
            ]
        )
    return rows


def render(latest: dict, baseline: dict | None) -> str:
    """The table: each workload's medians (min-max) in the latest run, and in `baseline`
    where it is another run."""
    runs = [(latest, f"latest, `{(latest['machine']['git_commit'] or 'unknown')[:10]}`")]
    if baseline is not None and baseline["utc"] != latest["utc"]:
        runs.insert(0, (baseline, f"baseline, `{(baseline['machine']['git_commit'] or 'unknown')[:10]}`"))
    rows = [row for data, run in runs for row in _rows(data, run)]
    rows.sort(key=lambda row: row[0])  # each workload's runs side by side
    targets = latest["targets"]
    failures = [
        f"- {name}: {code(result['error'])}"
        for name, result in latest["workloads"].items()
        if result.get("status") == "failed"
    ]
    return (
        "\n\n".join(
            [
                f"### {TITLE}",
                machine_line(latest) + f" {latest['protocol']}.",
                table(["workload", "run", "torch.export", "tt.compile", "tt.compile / torch.export"], rows),
                f"Target: GPT-2 small compiles in at most {targets['gpt2_small_ratio']:g}x its torch.export time "
                f"and in under {targets['gpt2_small_seconds']:g} s on a 2-core machine.",
                *(["Failed:\n" + "\n".join(failures)] if failures else []),
            ]
        )
        + "\n"
    )
