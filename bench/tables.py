"""Regenerates the README's benchmark tables from bench/results/*-latest.json.

    python bench/tables.py            # rewrite the block between the markers in README.md
    python bench/tables.py --check    # exit 1 if README.md's block is not what the results give
    python bench/tables.py --print    # the Markdown on stdout

The protocol (../shared/BENCHMARKS.md) has every table generated from the results JSON,
never typed: each table names the machine, commit, date and mode its numbers come from,
and a system that failed or is missing stays in the table with its error.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from results_schema import load_latest, load_latest_elsewhere

from tensortorrent.files import write_text_atomically

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
FIGURES_DIR = ROOT / "docs" / "figures"
BEGIN, END = "<!-- bench-tables:begin -->", "<!-- bench-tables:end -->"
ERROR_CHARS = 300  # of an error in a note under a table; the results file keeps it whole


@dataclass(frozen=True)
class Suite:
    key: str  # S1, S2, S3
    stem: str  # bench/results/STEM-latest.json
    title: str
    command: str  # what writes that file


SUITES = (
    Suite("S1", "s1", "S1: models that fit in memory (CPU)", ".venv/bin/python bench/s1_fit.py"),
    Suite(
        "S2", "streaming", "S2: weights larger than the RAM budget (CPU + disk)", ".venv/bin/python bench/streaming.py"
    ),
    Suite("S3", "planner", "S3: the planner", ".venv/bin/python bench/planner.py"),
)
# Figures in the order the README shows them: file name, alt text.
FIGURES = (
    ("s1_latency.png", "S1: latency relative to eager"),
    ("s2_budget.png", "S2: time per forward against the RAM budget"),
    ("s2_instructions.png", "S2: predicted against measured time per instruction"),
    ("s3_planner.png", "S3: optimality gap and planning time against graph size"),
)
S1_SYSTEMS = {
    "eager": "eager",
    "torch_compile": "torch.compile",
    "onnxruntime": "ONNX Runtime",
    "tensortorrent": "TensorTorrent",
    "tensortorrent_inductor": "TensorTorrent (Inductor regions)",
    "tensortorrent_auto": "TensorTorrent (auto regions)",
}
NOT_OK = {"failed": "failed", "missing": "missing (not installed)", "skipped": "skipped"}
S2_SYSTEMS = {
    "tensortorrent": "TensorTorrent",
    "accelerate": "Accelerate (disk offload)",
    "mmap": "eager over memory-mapped safetensors",
    "eager": "eager, every weight in RAM (T_compute)",
}


# Formatting


def unit_of(seconds: float) -> tuple[float, str, int]:
    """(factor, unit, decimals) that show a time to 3 significant digits: run-to-run noise hides the rest."""
    factor, unit = (1e6, "us") if seconds < 1e-3 else (1e3, "ms") if seconds < 1 else (1.0, "s")
    scaled = seconds * factor
    return factor, unit, 2 if scaled < 10 else 1 if scaled < 100 else 0


def duration(seconds: float) -> str:
    factor, unit, decimals = unit_of(seconds)
    return f"{seconds * factor:.{decimals}f} {unit}"


def spread_s(median: float, low: float, high: float) -> str:
    """Median (min-max), all in the median's unit."""
    factor, unit, decimals = unit_of(median)
    return f"{median * factor:.{decimals}f} {unit} ({low * factor:.{decimals}f}-{high * factor:.{decimals}f})"


def size(nbytes: float) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def error_value(value: float) -> str:
    return "0" if value == 0 else f"{value:.1e}"


def code(text: str) -> str:
    """An error as a note under a table can hold it: one line of inline code, its head only."""
    text = " ".join(text.replace("`", "'").split())
    if len(text) > ERROR_CHARS:
        return f"`{text[:ERROR_CHARS]} ...` (the whole error is in the results file)"
    return f"`{text}`"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def machine_line(data: dict) -> str:
    """Where and when the numbers were measured, and whether they are a measurement at all."""
    machine = data["machine"]
    commit = machine["git_commit"]
    commit = f"commit `{commit[:10]}`" if commit else "commit unknown"
    if machine["git_dirty"]:
        commit += " (with uncommitted changes)"
    when = datetime.fromisoformat(data["utc"]).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    line = (
        f"Measured on {machine['cpu_model']}, {machine['cores_usable']} usable cores, {machine['ram_gib']} GiB RAM; "
        f"{commit}; {when}; {data['mode']} run."
    )
    if data["mode"] == "quick":
        return "**Quick run: smaller sizes, fewer samples; a smoke test, not a measurement.**\n" + line
    return line


def not_run(suite: Suite) -> str:
    return (
        f"### {suite.title}\n\n{suite.key} has not been run: `{suite.command}` writes "
        f"`bench/results/{suite.stem}-latest.json`.\n"
    )


# S1


def s1_agreement(result: dict) -> str:
    text = f"max abs {error_value(result['max_abs_error'])}"
    if result["cosine"] is not None:
        text += f", cosine {result['cosine']:.6f}"
    if result["argmax_agreement"] is not None:
        text += f", argmax {result['argmax_agreement']:.1%}"
    return text


def s1_row(system: str, result: dict | None, notes: list[str], where: str) -> list[str]:
    """One system's cells; why a system has no time goes to `notes`, listed under the table."""
    name = S1_SYSTEMS.get(system, f"`{system}`")
    if result is None:
        return [name, "not recorded", "", "", ""]
    if result["status"] != "ok":
        notes.append(f"{name} on {where}, {result['status']}: {code(result['error'])}")
        return [name, f"{NOT_OK[result['status']]}, note {len(notes)}", "", "", ""]
    timing = result["timing"]
    latency = spread_s(timing["median_us"] / 1e6, timing["min_us"] / 1e6, timing["max_us"] / 1e6)
    agreement = "reference" if system == "eager" else s1_agreement(result)
    built = [f"built in {result['build_s']:.2f} s"] if result["build_s"] is not None else []
    remarks = "; ".join(built + ([result["notes"]] if result["notes"] else []))
    return [name, latency, f"{result['ratio_to_eager']:.2f}x", agreement, remarks]


def paired(ratio: dict | None) -> str:
    return "-" if ratio is None else f"{ratio['median']:.3f}x [{ratio['low']:.3f}, {ratio['high']:.3f}]"


def s1_paired(data: dict) -> str | None:
    """Per workload and system, its paired ratios to eager and to whole-model torch.compile
    (None for results recorded before paired ratios were)."""
    rows = []
    for workload, entry in data["workloads"].items():
        timed = [(s, r) for s, r in entry["systems"].items() if r["status"] == "ok" and r.get("paired_ratios")]
        for index, (system, result) in enumerate(timed):
            ratios = result["paired_ratios"]
            name = S1_SYSTEMS.get(system, f"`{system}`")
            rows.append(
                [workload if index == 0 else "", name, paired(ratios.get("eager")), paired(ratios.get("torch_compile"))]
            )
    if not rows:
        return None
    intro = (
        "Paired ratios: per round, a system's sample over the reference's sample of the same round; the "
        "median over rounds [95% confidence interval of that median]. Lower is faster; an interval that "
        "contains 1.000 is a difference this run cannot tell from noise."
    )
    return intro + "\n\n" + table(["workload", "system", "vs eager", "vs torch.compile"], rows)


def render_s1(data: dict) -> str:
    """The S1 table: per workload, every system's latency (median, min-max) and its ratio to eager's."""
    versions = data["versions"]
    baselines = ", ".join(
        f"{package} {versions[package] or 'not installed'}" for package in ("torch", "onnxruntime", "transformers")
    )
    settings = data["settings"]
    rows, notes = [], []
    for workload, entry in data["workloads"].items():
        systems = entry["systems"]
        names = list(S1_SYSTEMS) + [s for s in systems if s not in S1_SYSTEMS]
        for index, system in enumerate(names):
            rows.append([workload if index == 0 else "", *s1_row(system, systems.get(system), notes, workload)])
    header = [
        "workload",
        "system",
        "latency per call: median (min-max)",
        "vs eager",
        "agreement with eager",
        "build, remarks",
    ]
    workloads = "\n".join(f"- {name}: {entry['description']}" for name, entry in data["workloads"].items())
    parts = [
        f"### {SUITES[0].title}",
        machine_line(data)
        + f" {baselines}; {data['torch_threads']} torch threads; {settings['runs']} samples of about "
        f"{settings['sample_ms']:.0f} ms per system, interleaved, after a {settings['warmup_ms']:.0f} ms warm-up.",
        workloads,
        table(header, rows),
    ]
    pairs = s1_paired(data)
    if pairs:
        parts.append(pairs)
    if notes:
        parts.append("Notes:\n\n" + "\n".join(f"{i}. {note}" for i, note in enumerate(notes, 1)))
    return "\n\n".join(parts) + "\n"


def s1_ratio_cell(result: dict | None) -> str:
    """A system's ratio to eager in the same round (its paired median; the ratio of
    medians in results recorded before paired ratios were), or why it has none."""
    if result is None:
        return "not recorded"
    if result["status"] != "ok":
        return NOT_OK[result["status"]]
    ratio = (result.get("paired_ratios") or {}).get("eager")
    return f"{(ratio['median'] if ratio else result['ratio_to_eager']):.2f}x"


def render_s1_elsewhere(runs: list[dict]) -> str:
    """Per other CPU, the newest full S1 run there: eager's latency and every other
    system's ratio to it, per workload."""
    parts = [
        "### S1 on other machines",
        "The newest full run of S1 on each other CPU it ran on: eager's latency per call, and every other "
        "system's time relative to eager's (the paired median). The tables above come from the newest run of all.",
    ]
    for data in runs:
        header = ["workload", "eager", *[S1_SYSTEMS[s] for s in S1_SYSTEMS if s != "eager"]]
        rows = []
        for workload, entry in data["workloads"].items():
            systems = entry["systems"]
            eager = systems.get("eager")
            ran = eager is not None and eager["status"] == "ok"
            eager_cell = duration(eager["timing"]["median_us"] / 1e6) if ran else s1_ratio_cell(eager)
            rows.append([workload, eager_cell, *[s1_ratio_cell(systems.get(s)) for s in S1_SYSTEMS if s != "eager"]])
        parts += [machine_line(data), table(header, rows)]
    return "\n\n".join(parts) + "\n"


# S2


def describe_workload(workload: dict) -> str:
    text = f"{workload['name']} (width {workload['width']}, {workload['layers']} layers"
    return text + (f", vocab {workload['vocab']})" if workload.get("vocab") else ")")


def s2_bound(workload: dict) -> str:
    """The bound with what it is made of, so a reader can check it."""
    compute = workload["systems"]["eager"]["median_s"]
    read_bytes, gbps = workload["bytes_read_per_forward"], workload["reads"]["best_plain_gbps"]
    return f"{duration(workload['bound_s'])} = max({duration(compute)}, {read_bytes / 1e9:.3g} GB / {gbps:.2f} GB/s)"


def accelerate_ratio(ratio: float | None) -> str:
    return "Accelerate did not run (see below)" if ratio is None else f"{ratio:.3f}x"


def call_reads(workload: dict) -> str:
    """The median speed TensorTorrent's calls read at: where it differs from the bound's
    B_disk (measured minutes apart), the shared disk's speed changed in between."""
    speeds = workload["systems"].get("tensortorrent", {}).get("read_gbps") or []
    return f" ({statistics.median(speeds):.2f} GB/s)" if speeds else ""


def s2_summary(data: dict) -> str:
    header = [
        "workload",
        "weights",
        "RAM budget",
        "bound = max(T_compute, N / B_disk)",
        "TensorTorrent / bound (target <= 1.15)",
        "Accelerate / TensorTorrent (target >= 1.5)",
        "TensorTorrent measured / predicted at its read speed (the disk's speed during its calls)",
    ]
    rows = [
        [
            describe_workload(w["workload"]),
            size(w["weight_bytes"]),
            size(w["ram_budget_bytes"]),
            s2_bound(w),
            f"{w['tensortorrent_over_bound']:.3f}x",
            accelerate_ratio(w.get("accelerate_over_tensortorrent")),
            f"{w['measured_over_predicted_at_call_speed']:.3f}{call_reads(w)}",
        ]
        for w in data["checkpoints"]
    ]
    return table(header, rows)


def s2_systems(data: dict) -> str:
    """Every system's row per workload and budget; a baseline that failed or is missing
    keeps its row, its error in a note under the table."""
    header = ["workload", "system", "time per forward: median (min-max)", "multiple of the bound", "peak RSS (VmHWM)"]
    header.append("max abs error vs eager")
    rows, notes = [], []
    for workload in data["checkpoints"]:
        systems = workload["systems"]
        names = [s for s in S2_SYSTEMS if s in systems] + [s for s in systems if s not in S2_SYSTEMS]
        for index, name in enumerate(names):
            system, label = systems[name], S2_SYSTEMS.get(name, f"`{name}`")
            first = f"{workload['workload']['name']} at {size(workload['ram_budget_bytes'])}" if index == 0 else ""
            if system.get("status", "ok") != "ok":
                notes.append(f"{label} on {workload['workload']['name']}, {system['status']}: {code(system['error'])}")
                rows.append([first, label, f"{NOT_OK[system['status']]}, note {len(notes)}", "", "", ""])
                continue
            times = system["forward_s"]
            rows.append(
                [
                    first,
                    label,
                    spread_s(system["median_s"], min(times), max(times)) if times else duration(system["median_s"]),
                    f"{system['over_bound']:.3f}x",
                    size(system["peak_rss_bytes"]),
                    error_value(system["max_abs_error_vs_eager"]),
                ]
            )
    text = table(header, rows)
    if notes:
        text += "\n\nNotes:\n\n" + "\n".join(f"{i}. {note}" for i, note in enumerate(notes, 1))
    return text


def s2_also(data: dict) -> str:
    """The two other measurements of the same run that the S2 claims rest on."""
    reads, stream = data["reads"], data["stream"]
    return (
        f"- I/O engine: {reads['engine_gbps']['median']:.2f} GB/s reading a {size(reads['bytes'])} file cold, "
        f"{reads['engine_over_best']:.3f}x the harness's best plain read ({reads['best_plain']}, "
        f"{reads['best_plain_gbps']:.2f} GB/s; target >= 0.9).\n"
        f"- A saved artifact at twice its budget ({stream['layers']} x Linear({stream['width']}, {stream['width']}), "
        f"{size(stream['weight_bytes'])} of weights, budget {size(stream['ram_budget_bytes'])}): "
        f"{duration(stream['streamed_s']['median'])} per forward, {stream['streamed_over_bound']:.3f}x its bound "
        f"({duration(stream['bound_s'])})."
    )


def render_s2(data: dict) -> str:
    """The S2 tables: per workload the bound and the targets, then every system's time, bound multiple and RSS."""
    parts = [f"### {SUITES[1].title}", machine_line(data)]
    if data["checkpoints"]:
        runs = len(data["checkpoints"][0]["systems"]["tensortorrent"]["forward_s"])
        parts[-1] += (
            f" Each system runs in its own process (the budget binds TensorTorrent and Accelerate; the eager rows "
            f"have none): a warm-up, then {runs} timed forwards, each after dropping the page cache of every "
            "weight file it reads."
        )
        parts += [s2_summary(data), s2_systems(data)]
    else:
        parts.append("This run has no checkpoint workloads.")
    parts.append(s2_also(data))
    return "\n\n".join(parts) + "\n"


# S3


def s3_measures(data: dict) -> str:
    gap, large, real = data["optimality"], data["large"], data["greedy_real_model"]
    planning = large["planning_s"]
    rows = [
        [
            f"(a) gap to the exhaustive optimum, {gap['instances']} small problems",
            f"median {gap['median_gap']:.2%}, worst {gap['worst_gap']:.2%}; {gap['within_1_percent']:.1%} within 1%",
            "within 1%",
        ],
        [
            f"(b) planning time, {large['regions']} regions on {large['devices']} devices",
            spread_s(planning["median"], planning["min"], planning["max"]),
            "under 1 s",
        ],
        [
            f"(c) Accelerate's policy / the search, same {large['regions']}-region graph (estimated latency)",
            f"{large['greedy_over_search']:.2f}x",
            "",
        ],
        [
            f"(c) Accelerate's fill / the plan, {real['regions']}-layer model on a declared machine (simulated)",
            f"{real['greedy_over_plan']:.2f}x",
            "",
        ],
    ]
    return table(["measure", "result", "target"], rows)


def s3_prediction(data: dict) -> tuple[str, str | None]:
    """(d) per model: predicted against measured; with the note that a declared
    device's agreement is by construction (its runtime waits out the prediction)."""
    rows, declared = [], False
    for name, row in data["prediction"].items():
        label = name
        if name.startswith("declared/"):
            declared = True
            label += " (see the note)"
        measured = spread_s(row["measured_median_s"], row["measured_min_s"], row["measured_max_s"])
        rows.append(
            [
                label,
                str(row["regions"]),
                duration(row["predicted_s"]),
                measured,
                f"{row['measured_over_predicted']:.3f}",
            ]
        )
    header = [
        "(d) model",
        "regions",
        "predicted",
        "measured: median (min-max)",
        "measured / predicted (target 0.85-1.15)",
    ]
    note = (
        "Note: on declared (virtual) devices the runtime waits out the predicted time itself, "
        "so agreement there is by construction, not evidence of the simulator's accuracy."
    )
    return table(header, rows), note if declared else None


def render_s3(data: dict) -> str:
    """The S3 tables: optimality gap, planning time, Accelerate's policy, predicted against measured."""
    prediction, note = s3_prediction(data)
    parts = [f"### {SUITES[2].title}", machine_line(data), s3_measures(data), prediction]
    return "\n\n".join(parts + ([note] if note else [])) + "\n"


# The block


RENDERERS = {"S1": render_s1, "S2": render_s2, "S3": render_s3}


def render_figures(present: list[str]) -> str:
    """Links to the figures that exist (bench/figures.py makes them), in README order."""
    images = [f"![{alt}](docs/figures/{name})" for name, alt in FIGURES if name in present]
    if not images:
        return ""
    return "### Figures\n\nMade by `python bench/figures.py` from the same files.\n\n" + "\n\n".join(images) + "\n"


def render(results: dict[str, dict | None], figures: list[str], s1_elsewhere: list[dict] = ()) -> str:
    """The whole block: every suite's tables (or that it has not been run), S1's figures on
    other CPUs after S1's own, then the figures."""
    parts = [
        "Generated by `python bench/tables.py` from `bench/results/*-latest.json` (and, for S1 on other machines, "
        "the newest full run on each other CPU); do not edit by hand. "
        "How each number is measured: [docs/benchmarks.md](docs/benchmarks.md).\n"
    ]
    for suite in SUITES:
        data = results.get(suite.key)
        parts.append(RENDERERS[suite.key](data) if data is not None else not_run(suite))
        if suite.key == "S1" and s1_elsewhere:
            parts.append(render_s1_elsewhere(list(s1_elsewhere)))
    figure_links = render_figures(figures)
    return "\n".join(parts + ([figure_links] if figure_links else []))


def load_results(results_dir: Path) -> dict[str, dict | None]:
    return {suite.key: load_latest(results_dir, suite.stem) for suite in SUITES}


def load_s1_elsewhere(results_dir: Path, results: dict[str, dict | None]) -> list[dict]:
    return load_latest_elsewhere(results_dir, SUITES[0].stem, results["S1"])


def present_figures(figures_dir: Path) -> list[str]:
    return [name for name, _ in FIGURES if (figures_dir / name).exists()]


def replace_block(text: str, block: str) -> str:
    """`text` with what lies between the markers replaced by `block`; ValueError without exactly one pair."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"the README needs one {BEGIN} line followed by one {END} line")
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), flags=re.S)
    return pattern.sub(lambda _: f"{BEGIN}\n{block.rstrip()}\n{END}", text)


def write_readme(path: Path, text: str) -> None:
    """Atomically, keeping the file's permissions (the temporary file is created 0600)."""
    mode = path.stat().st_mode & 0o777
    write_text_atomically(path, text)
    os.chmod(path, mode)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="exit 1 if the README's tables are stale")
    action.add_argument("--print", action="store_true", help="write the Markdown to stdout, change nothing")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help="where the *-latest.json files are")
    parser.add_argument("--figures", type=Path, default=FIGURES_DIR, help="where figures.py wrote the PNGs")
    args = parser.parse_args(argv)
    try:
        results = load_results(args.results)
        block = render(results, present_figures(args.figures), load_s1_elsewhere(args.results, results))
        if args.print:
            sys.stdout.write(block)
            return 0
        text = args.readme.read_text()
        updated = replace_block(text, block)
    except (OSError, ValueError) as error:
        print(f"tables.py: error: {error}", file=sys.stderr)
        return 2
    if args.check:
        if updated != text:
            print(f"{args.readme} is stale: run python bench/tables.py", file=sys.stderr)
            return 1
        return 0
    if updated != text:
        write_readme(args.readme, updated)
    print(f"{args.readme}: tables {'updated' if updated != text else 'already up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
