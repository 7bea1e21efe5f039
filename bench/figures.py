"""Draws the benchmark figures (PNG, under docs/figures/) from bench/results/*-latest.json.

    python bench/figures.py                  # every figure whose results exist
    python bench/figures.py --out /tmp/figs  # somewhere else

matplotlib is the optional `bench` extra, imported here only, so that the tables and the
tests need nothing beyond the package. A figure whose results file is absent, or older
than the records it needs, is skipped with a message saying what to run; that is not an
error. Every figure names the machine, commit, date and mode of its numbers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")  # files only: no display on the benchmark machines
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from table_format import NOT_OK  # noqa: E402
from tables import FIGURES_DIR, RESULTS_DIR, SUITES, load_results  # noqa: E402
from tables_s1 import S1_SYSTEMS  # noqa: E402
from tables_s2 import S2_SYSTEMS  # noqa: E402

COMMANDS = {suite.key: suite.command for suite in SUITES}


STARTS_ENDS = (("start_us", "end_us"), ("predicted_start_us", "predicted_end_us"))  # measured, predicted


class Skipped(Exception):
    """A figure that these results cannot draw; the message says what would."""


def provenance(data: dict) -> str:
    """The figure's footer: where and when its numbers were measured, and whether they are a measurement."""
    machine = data["machine"]
    commit = (machine["git_commit"] or "unknown")[:10] + (" (dirty)" if machine["git_dirty"] else "")
    mode = "QUICK RUN: smaller sizes, not a measurement" if data["mode"] == "quick" else "full run"
    return (
        f"{mode}; {machine['cpu_model']}, {machine['cores_usable']} cores, {machine['ram_gib']} GiB RAM; "
        f"commit {commit}; {data['utc'][:10]}"
    )


def finish(figure, data: dict, path: Path, bottom: float = 0.03) -> None:
    """Footer, layout (the lowest `bottom` of the figure left to the footer and a legend), file."""
    color = "red" if data["mode"] == "quick" else "dimgray"
    figure.text(0.01, 0.005, provenance(data), fontsize=7, color=color, va="bottom")
    figure.tight_layout(rect=(0, bottom, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def s1_latency(data: dict, path: Path) -> None:
    """Grouped bars: per workload, each system's median latency over eager's, the ratio
    written on the bar; a system without a time gets a labelled gap instead of a bar, so it
    is never silently absent."""
    workloads = list(data["workloads"])
    systems = list(S1_SYSTEMS) + sorted({s for w in data["workloads"].values() for s in w["systems"]} - set(S1_SYSTEMS))
    width = 0.8 / len(systems)
    figure, axes = plt.subplots(figsize=(10, 4.5))
    highest = 1.0
    for index, system in enumerate(systems):
        offsets = [w + (index - (len(systems) - 1) / 2) * width for w in range(len(workloads))]
        results = [data["workloads"][w]["systems"].get(system) for w in workloads]
        timed = [bool(r) and r["status"] == "ok" for r in results]
        ratios = [r["ratio_to_eager"] if ok else 0.0 for r, ok in zip(results, timed)]
        highest = max(highest, *ratios)
        bars = axes.bar(offsets, ratios, width, label=S1_SYSTEMS.get(system, system))
        axes.bar_label(bars, [f"{r:.2f}" if ok else "" for r, ok in zip(ratios, timed)], fontsize=6)
        for x, result, ok in zip(offsets, results, timed):
            if not ok:
                label = NOT_OK[result["status"]].split()[0] if result else "not recorded"
                color = bars[0].get_facecolor()
                axes.text(x, 0.02, label, rotation=90, ha="center", va="bottom", fontsize=7, color=color)
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_ylim(0, highest * 1.3)  # room for the legend above the bars
    axes.set_xticks(range(len(workloads)), workloads)
    axes.set_ylabel("median latency / eager's (lower is faster)")
    axes.set_title("S1: latency relative to eager (CPU)")
    axes.legend(fontsize=8, ncols=3, loc="upper left")
    finish(figure, data, path)


def s2_budget_panel(axes, name: str, runs: list[dict]) -> None:
    """One workload: each system's time per forward (min-max bars) at each budget measured,
    systems dodged sideways so that none hides another, the bound a dashed bar across them."""
    runs.sort(key=lambda w: w["ram_budget_bytes"])
    weights = runs[0]["weight_bytes"] / 2**30
    systems = [s for s in S2_SYSTEMS if s in runs[0]["systems"]]
    step = weights * 0.03
    budgets = [w["ram_budget_bytes"] / 2**30 for w in runs]
    for index, system in enumerate(systems):
        shift = (index - (len(systems) - 1) / 2) * step
        entries = [(b, w["systems"][system]) for b, w in zip(budgets, runs)]
        ran = [(b, t) for b, t in entries if t.get("status", "ok") == "ok"]
        if not ran:  # failed or missing at every budget: the tables say why
            continue
        times = [t for _, t in ran]
        medians = [t["median_s"] for t in times]
        low = [m - min(t["forward_s"] or [m]) for m, t in zip(medians, times)]
        high = [max(t["forward_s"] or [m]) - m for m, t in zip(medians, times)]
        x = [b + shift for b, _ in ran]
        axes.errorbar(x, medians, yerr=[low, high], marker="o", capsize=3, label=S2_SYSTEMS[system])
    half = step * len(systems) / 2
    for index, (run, budget) in enumerate(zip(runs, budgets)):
        label = "bound: max(T_compute, N / B_disk)" if index == 0 else None
        axes.hlines(run["bound_s"], budget - half, budget + half, colors="black", linestyles="--", label=label)
    axes.axvline(weights, color="gray", linestyle=":", label="all the weights")
    axes.set_xlim(0, weights * 1.1)
    axes.set_yscale("log")
    axes.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1, 2, 5)))
    axes.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    axes.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes.set(xlabel="RAM budget (GiB)", ylabel="time per forward (s)")
    one = ", one budget measured" if len(runs) == 1 else ""
    axes.set_title(f"{name}: {weights:.2f} GiB of weights{one}", fontsize=10)


def s2_budget(data: dict, path: Path) -> None:
    """Per workload, time per forward against the RAM budget for each system, the bound
    drawn. The suite measures each workload at one budget so far; the title says so."""
    if not data["checkpoints"]:
        raise Skipped("the streaming results have no checkpoint workloads")
    by_name: dict[str, list[dict]] = {}
    for workload in data["checkpoints"]:
        by_name.setdefault(workload["workload"]["name"], []).append(workload)
    figure, panels = plt.subplots(1, len(by_name), figsize=(5.5 * len(by_name), 4.8), squeeze=False)
    for axes, (name, runs) in zip(panels[0], by_name.items()):
        s2_budget_panel(axes, name, runs)
    # One legend below the panels: inside one, it would hide the points.
    figure.legend(
        *panels[0][0].get_legend_handles_labels(), loc="lower center", ncols=3, fontsize=8, bbox_to_anchor=(0.5, 0.03)
    )
    single = all(len(runs) == 1 for runs in by_name.values())
    note = "\n(each workload measured at one budget only)" if single else ""
    figure.suptitle(f"S2: time per forward against the RAM budget, page cache dropped before each{note}", fontsize=11)
    finish(figure, data, path, bottom=0.16)


def s2_instructions(data: dict, path: Path) -> None:
    """The last timed call of S2's streamed artifact, instruction by instruction: predicted
    against measured duration, and predicted against measured end (where drift piles up)."""
    records = data["stream"].get("instructions")
    if not records:
        raise Skipped(f"streaming-latest.json predates per-instruction records: run {COMMANDS['S2']}")
    predicted = [r for r in records if r["predicted_end_us"] >= 0]
    timed = [r for r in predicted if r["end_us"] > r["start_us"] and r["predicted_end_us"] > r["predicted_start_us"]]
    if not timed:
        raise Skipped("no instruction of the recorded call has both a measured and a predicted duration")
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.8))
    for kind in sorted({r["kind"] for r in predicted}):
        mine = [r for r in timed if r["kind"] == kind]
        left.scatter(
            [(r["predicted_end_us"] - r["predicted_start_us"]) / 1e3 for r in mine],
            [(r["end_us"] - r["start_us"]) / 1e3 for r in mine],
            s=14,
            label=kind,
        )
        same = [r for r in predicted if r["kind"] == kind]
        right.scatter([r["predicted_end_us"] / 1e3 for r in same], [r["end_us"] / 1e3 for r in same], s=14, label=kind)
    durations = [(r[end] - r[start]) / 1e3 for r in timed for start, end in STARTS_ENDS]
    ends = [r[end] / 1e3 for r in predicted for _, end in STARTS_ENDS]
    for axes, scale, (low, high) in (
        (left, "log", (min(durations), max(durations))),
        (right, "linear", (0, max(ends))),
    ):
        axes.plot([low, high], [low, high], "k:", linewidth=0.8, label="measured = predicted")
        axes.set_xscale(scale)
        axes.set_yscale(scale)
        axes.legend(fontsize=7)
    left.set(xlabel="predicted duration (ms)", ylabel="measured duration (ms)")
    left.set_title(f"duration ({len(timed)} of {len(records)} with both durations > 0)", fontsize=10)
    right.set(xlabel="predicted end (ms into the call)", ylabel="measured end (ms into the call)")
    right.set_title(f"end time ({len(predicted)} of {len(records)} with a prediction)", fontsize=10)
    stream = data["stream"]
    figure.suptitle(
        f"S2: one streamed forward, {stream['layers']} x Linear({stream['width']}, {stream['width']}) "
        f"under a {stream['ram_budget_bytes'] / 2**30:.2f} GiB budget: predicted against measured per instruction",
        fontsize=10,
    )
    finish(figure, data, path)


def s3_planner(data: dict, path: Path) -> None:
    """The search's gap to the exhaustive optimum per problem size, and its planning time
    against graph size (log-log, min-max as error bars)."""
    gaps, sweep = data["optimality"].get("by_regions"), data.get("planning_sweep")
    if not gaps or not sweep:
        raise Skipped(f"planner-latest.json predates the per-size records: run {COMMANDS['S3']}")
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    sizes = [row["regions"] for row in gaps]
    left.plot(sizes, [row["median_gap"] * 100 for row in gaps], marker="o", label="median")
    left.plot(sizes, [row["worst_gap"] * 100 for row in gaps], marker="v", label="worst")
    left.axhline(1.0, color="gray", linestyle=":", label="target: within 1%")
    left.set(xlabel="regions per problem", ylabel="gap to the exhaustive optimum (%)")
    left.set_title(f"(a) optimality, {data['optimality']['instances']} random problems", fontsize=10)
    left.legend(fontsize=8)
    regions = [row["regions"] for row in sweep]
    medians = [row["planning_s"]["median"] for row in sweep]
    errors = [
        [m - row["planning_s"]["min"] for m, row in zip(medians, sweep)],
        [row["planning_s"]["max"] - m for m, row in zip(medians, sweep)],
    ]
    right.errorbar(regions, medians, yerr=errors, marker="o", capsize=3, label="median (min-max)")
    right.axhline(1.0, color="gray", linestyle=":", label="target at 1,000 regions: under 1 s")
    right.set(xscale="log", yscale="log", xlabel=f"regions ({sweep[0]['devices']} devices)", ylabel="planning time (s)")
    right.set_title("(b) planning time against graph size", fontsize=10)
    right.legend(fontsize=8)
    figure.suptitle("S3: the placement search", fontsize=11)
    finish(figure, data, path)


# Figure file name -> (the suite whose results it draws, how).
DRAW = {
    "s1_latency.png": ("S1", s1_latency),
    "s2_budget.png": ("S2", s2_budget),
    "s2_instructions.png": ("S2", s2_instructions),
    "s3_planner.png": ("S3", s3_planner),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help="where the *-latest.json files are")
    parser.add_argument("--out", type=Path, default=FIGURES_DIR, help="where the PNGs go")
    args = parser.parse_args(argv)
    try:
        results = load_results(args.results)
    except ValueError as error:
        print(f"figures.py: error: {error}", file=sys.stderr)
        return 2
    for name, (suite, draw) in DRAW.items():
        data = results[suite]
        try:
            if data is None:
                raise Skipped(f"{suite} has not been run: {COMMANDS[suite]}")
            draw(data, args.out / name)
            print(f"wrote {args.out / name}")
        except Skipped as reason:
            print(f"skipped {name}: {reason}")
            stale = args.out / name
            if stale.exists():  # drawn from earlier results, it would contradict the tables
                stale.unlink()
                print(f"removed the old {stale}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
