"""The README's S2 tables (weights larger than the RAM budget): per workload and budget the
bound and the targets, every system's time, and the I/O engine and artifact figures of
the same run."""

from __future__ import annotations

import statistics

from table_format import NOT_OK, code, duration, error_value, machine_line, size, spread_s, table

TITLE = "S2: weights larger than the RAM budget (CPU + disk)"
S2_SYSTEMS = {
    "tensortorrent": "TensorTorrent",
    "accelerate": "Accelerate (disk offload)",
    "mmap": "eager over memory-mapped safetensors",
    "eager": "eager, every weight in RAM",
}


def describe_workload(workload: dict) -> str:
    text = f"{workload['name']} (width {workload['width']}, {workload['layers']} layers"
    return text + (f", vocab {workload['vocab']})" if workload.get("vocab") else ")")


def s2_bound(workload: dict) -> str:
    """The bound with what it is made of, so a reader can check it. Results from before the
    compute floor and N were recorded made it of eager's time and the bytes TensorTorrent read."""
    compute = workload.get("compute_floor_s", workload["systems"]["eager"]["median_s"])
    floor = workload.get("compute_floor_system", "eager")
    read_bytes = workload.get("must_read_bytes", workload["bytes_read_per_forward"])
    gbps = workload["reads"]["best_plain_gbps"]
    return (
        f"{duration(workload['bound_s'])} = max({duration(compute)} ({floor}), "
        f"{read_bytes / 1e9:.3g} GB / {gbps:.2f} GB/s)"
    )


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
        "bound = max(T_compute, N / B_disk): T_compute the faster of eager and TensorTorrent in RAM, N the "
        "weights less the budget",
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
            in_ram = system.get("compiled_in_ram_forward_s")
            if in_ram:  # timed interleaved with eager, in its process
                median = statistics.median(in_ram)
                rows.append(
                    [
                        "",
                        "TensorTorrent, every weight in RAM (no budget; in eager's process)",
                        spread_s(median, min(in_ram), max(in_ram)),
                        f"{median / workload['bound_s']:.3f}x",
                        "",
                        "",
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
    parts = [f"### {TITLE}", machine_line(data)]
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
