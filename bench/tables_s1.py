"""The README's S1 tables (models that fit in memory): every system's latency and its
ratio to eager per workload, the paired ratios, and the newest run of each other CPU."""

from __future__ import annotations

from table_format import NOT_OK, code, duration, error_value, machine_line, spread_s, table

TITLE = "S1: models that fit in memory (CPU)"
S1_SYSTEMS = {
    "eager": "eager",
    "torch_compile": "torch.compile",
    "torch_compile_frozen": "torch.compile (freezing)",
    "onnxruntime": "ONNX Runtime",
    "tensortorrent": "TensorTorrent",
    "tensortorrent_inductor": "TensorTorrent (Inductor regions)",
    "tensortorrent_auto": "TensorTorrent (auto regions)",
}


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
                [
                    workload if index == 0 else "",
                    name,
                    *[
                        paired(ratios.get(reference))
                        for reference in ("eager", "torch_compile", "torch_compile_frozen")
                    ],
                ]
            )
    if not rows:
        return None
    intro = (
        "Paired ratios: per round, a system's sample over the reference's sample of the same round; the "
        "median over rounds [95% confidence interval of that median]. Lower is faster; an interval that "
        "contains 1.000 is a difference this run cannot tell from noise."
    )
    header = ["workload", "system", "vs eager", "vs torch.compile", "vs torch.compile (freezing)"]
    return intro + "\n\n" + table(header, rows)


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
        f"### {TITLE}",
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
