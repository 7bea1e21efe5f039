"""compiled.visualize(): the plan as one self-contained HTML page.

The SVG is drawn here, in Python, so that the page needs nothing to render (no network,
no script library) and its content can be checked by parsing the file. A few lines of
inline JS only add interaction: hovering a bar highlights the same instruction's predicted
and measured bars. When that script has run without throwing, it marks the body
`data-rendered="1"` (else `data-render-error`), which a headless browser can check.
"""

from __future__ import annotations

import math
import os
from html import escape

from .. import core
from ..files import write_text_atomically
from ..planning.lowering import UNBOUNDED
from ..units import format_bytes
from .plan_page_data import PlanSources, page_data

COLORS = {
    "compute": "#4e79a7",
    "load": "#f28e2b",
    "copy": "#59a14f",
    "spill": "#e15759",
    "reload": "#b07aa1",
    "free": "#8c8c8c",
}
LEFT, WIDTH, ROW = 150, 1000, 14  # px: the lane labels' column, the time axis, one row of bars
STYLE = """
body { font: 13px system-ui, sans-serif; margin: 16px 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
table { border-collapse: collapse; margin: 8px 0; } td, th { border: 1px solid #ccc; padding: 2px 8px; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
svg { display: block; } svg text { font-size: 11px; fill: #333; }
rect.bar.hot { stroke: #000; stroke-width: 2; } .note { color: #666; } #info { min-height: 1.4em; }
.key { display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 12px; vertical-align: middle; }
"""
SCRIPT = """
(function () {
  try {
    var info = document.getElementById("info");
    document.querySelectorAll("rect.bar").forEach(function (bar) {
      var same = 'rect.bar[data-id="' + bar.getAttribute("data-id") + '"]';
      bar.addEventListener("mouseenter", function () {
        document.querySelectorAll(same).forEach(function (b) { b.classList.add("hot"); });
        info.textContent = bar.querySelector("title").textContent;
      });
      bar.addEventListener("mouseleave", function () {
        document.querySelectorAll(same).forEach(function (b) { b.classList.remove("hot"); });
      });
    });
    document.body.setAttribute("data-rendered", "1");
  } catch (error) {
    document.body.setAttribute("data-render-error", String(error));
  }
})();
"""


def write_plan_page(
    path: str | os.PathLike, sources: PlanSources, report: core.RunReport | None, peaks: dict[str, int]
) -> str:
    """Writes the page atomically (no half-written file on any error); returns the path."""
    return write_text_atomically(path, render(page_data(sources, report, peaks)), "visualize")


def render(data: dict) -> str:
    """The whole page from page_data()'s dict."""
    span = max([1.0] + [bar["end"] for bar in data["predicted"] + (data["measured"] or [])])
    body = [
        f"<h1>TensorTorrent plan for {escape(data['model'])}</h1>",
        f"<p>{_summary(data)}</p>",
        "<h2>Timeline per queue</h2>",
        "<p>" + "".join(f'<span class="key" style="background:{c}"></span>{k}' for k, c in COLORS.items()) + "</p>",
        _timeline(data, span),
        '<p id="info" class="note">Hover a bar: the same instruction is outlined in both timelines.</p>',
        "<h2>Predicted against measured, per instruction kind</h2>",
        _kind_table(data["kinds"]),
        "<h2>Memory per tier (predicted over the call)</h2>",
        *_memory_section(data["memory"]),
        "<h2>Regions</h2>",
        _region_table(data["regions"]),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>TensorTorrent plan: {escape(data['model'])}</title><style>{STYLE}</style></head>\n"
        f"<body>{''.join(body)}<script>{SCRIPT}</script></body></html>\n"
    )


def _summary(data: dict) -> str:
    path = "the direct path (one region called inline)" if data["direct"] else "the data plane's Program"
    predicted = max([0.0] + [bar["end"] for bar in data["predicted"]])
    last = "No call has run yet: only the prediction is shown."
    if data["measured"] is not None:
        last = f"Last call: {_us(data['wall_us'])} measured, {len(data['measured'])} instruction(s) ran."
    return (
        f"Runs on {path}; {len(data['predicted'])} instruction(s) on {len(data['lanes'])} queue(s); "
        f"predicted {_us(predicted)} per call. {last}<br><span class='note'>Direct path: "
        f"{escape(data['direct_reason'])}</span>"
    )


def _timeline(data: dict, span: float) -> str:
    """Per lane, its predicted bars, then (after a call) its measured ones, on one time axis."""
    parts, y = [], 24
    groups = [("predicted", data["predicted"])] + ([("measured", data["measured"])] if data["measured"] else [])
    for lane in data["lanes"]:
        parts.append(f'<g class="lane" data-lane="{escape(lane)}">')
        parts.append(f'<text x="4" y="{y + 11}" font-weight="bold">{escape(lane)}</text>')
        for source, bars in groups:
            rows = _rows([bar for bar in bars if bar["lane"] == lane])
            parts.append(f'<text x="20" y="{y + 24}" class="note">{source}</text>')
            for bar, row in rows:
                parts.append(_bar(bar, source, span, y + 14 + row * ROW))
            y += 14 + ROW * max(1, 1 + max((row for _, row in rows), default=0))
        parts.append(f'<line x1="0" x2="{LEFT + WIDTH}" y1="{y + 4}" y2="{y + 4}" stroke="#ddd"/></g>')
        y += 8
    return _svg('class="timeline"', y + 4, [_axis(span, 0, y), *parts])


def _rows(bars: list[dict]) -> list[tuple[dict, int]]:
    """Each bar with the first row of its lane free at its start, so that bars running at
    once (a queue of several slots) do not hide each other."""
    ends: list[float] = []
    placed = []
    for bar in sorted(bars, key=lambda b: (b["start"], b["end"])):
        row = next((r for r, end in enumerate(ends) if end <= bar["start"]), len(ends))
        if row == len(ends):
            ends.append(bar["end"])
        else:
            ends[row] = bar["end"]
        placed.append((bar, row))
    return placed


def _bar(bar: dict, source: str, span: float, y: int) -> str:
    x0, x1 = _x(bar["start"], span), _x(bar["end"], span)
    how = " (no prediction: drawn when its dependencies end)" if bar.get("derived") else ""
    faded = ' fill-opacity="0.6"' if source == "measured" else ""
    title = f"#{bar['id']} {bar['kind']} {bar['label']}, {source} {_us(bar['start'])} to {_us(bar['end'])}{how}"
    return (
        f'<rect class="bar {source}" data-id="{bar["id"]}" data-kind="{escape(bar["kind"])}" x="{x0:.1f}" '
        f'y="{y}" width="{max(1.5, x1 - x0):.1f}" height="{ROW - 2}" fill="{COLORS.get(bar["kind"], "#444")}"'
        f"{faded}><title>{escape(title)}</title></rect>"
    )


def _axis(span: float, top: int, bottom: int) -> str:
    """Ticks of round times across the axis, from `top` to `bottom`."""
    step = 10 ** math.floor(math.log10(span / 8))
    step *= next(m for m in (1, 2, 5, 10) if span / (step * m) <= 10)
    ticks = []
    for k in range(int(span // step) + 1):
        x = _x(k * step, span)
        ticks.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + 14}" y2="{bottom}" stroke="#eee"/>')
        ticks.append(f'<text x="{x:.1f}" y="{top + 11}" text-anchor="middle">{_us(k * step)}</text>')
    return "".join(ticks)


def _memory_section(tiers: list[dict]) -> list[str]:
    if not tiers:
        return ['<p class="note">No memory prediction: this plan was replayed without its lowered Program.</p>']
    span = max([1.0] + [tier["until_us"] for tier in tiers] + [at for tier in tiers for at, _ in tier["points"]])
    rows = [
        [
            escape(tier["name"]),
            tier["kind"],
            "unbounded" if tier["capacity"] >= UNBOUNDED else format_bytes(tier["capacity"]),
            format_bytes(tier["predicted_peak"]),
            format_bytes(tier["plan_peak"]),
            "-" if tier["measured_peak"] is None else format_bytes(tier["measured_peak"]),
        ]
        for tier in tiers
    ]
    headers = ["tier", "kind", "capacity", "predicted peak (this curve)", "memory plan peak", "measured (last call)"]
    note = (
        '<p class="note">Residents, plus each transient buffer from its first write to its free, at the '
        "predicted times; on disk also the file ranges the weights are read from. Dashed: the last call's "
        "measured peak.</p>"
    )
    return [_table("peaks", headers, rows), note, *(_memory_chart(tier, span) for tier in tiers)]


def _memory_chart(tier: dict, span: float) -> str:
    """A step curve of the bytes held on one tier, and the last call's measured peak."""
    height, top = 90, 20
    scale = max(tier["predicted_peak"], tier["measured_peak"] or 0, 1) * 1.1

    def y(level: float) -> float:
        return top + height - level / scale * height

    path = f"M{LEFT} {y(tier['points'][0][1]):.1f}"
    for at, level in tier["points"]:
        path += f" H{_x(at, span):.1f} V{y(level):.1f}"
    label = f"{tier['name']}: peak {format_bytes(tier['predicted_peak'])}"
    parts = [
        _axis(span, 0, top + height),
        f'<text x="4" y="{top + 12}" font-weight="bold">{escape(label)}</text>',
        f'<text x="4" y="{top + 28}" class="note">scale 0 to {format_bytes(int(scale))}</text>',
        f'<path class="memory" d="{path} H{LEFT + WIDTH}" fill="none" stroke="#4e79a7" stroke-width="1.5"/>',
        f'<line x1="{LEFT}" x2="{LEFT + WIDTH}" y1="{top + height}" y2="{top + height}" stroke="#999"/>',
    ]
    if tier["measured_peak"] is not None:
        at = y(tier["measured_peak"])
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + WIDTH}" y1="{at:.1f}" y2="{at:.1f}" stroke="#e15759" '
            f'stroke-dasharray="5 3"><title>measured peak {format_bytes(tier["measured_peak"])}</title></line>'
        )
    return _svg(f'class="memory" data-tier="{escape(tier["name"])}"', top + height + 6, parts)


def _kind_table(kinds: list[dict]) -> str:
    rows = [[k["kind"], str(k["count"]), _us(k["predicted_us"]), _us(k["measured_us"])] for k in kinds]
    return _table("kinds", ["kind", "instructions", "predicted (summed)", "measured, last call (summed)"], rows)


def _region_table(regions: list[dict]) -> str:
    rows = [
        [
            escape(r["name"]),
            escape(r["device"]),
            f"{r['flops'] / 1e6:.2f}",
            format_bytes(r["parameter_bytes"]),
            _us(r["profiled_us"]),
            _us(r["predicted_us"]),
            _us(r["measured_us"]),
        ]
        for r in regions
    ]
    headers = ["region", "device", "MFLOP", "params", "cpu time profiled", "predicted", "measured, last call"]
    return _table("regions", headers, rows)


def _table(name: str, headers: list[str], rows: list[list[str]]) -> str:
    """Cells arrive escaped; numbers (all but the first two columns) align right."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td{' class=n' if c > 1 else ''}>{cell}</td>" for c, cell in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f'<table class="{name}"><tr>{head}</tr>{body}</table>'


def _svg(attributes: str, height: float, parts: list[str]) -> str:
    return f'<svg {attributes} width="{LEFT + WIDTH + 20}" height="{height:.0f}">{"".join(parts)}</svg>'


def _x(us: float, span: float) -> float:
    return LEFT + us / span * WIDTH


def _us(us: float | None) -> str:
    """Microseconds, readably ('-' when unknown)."""
    if us is None:
        return "-"
    return f"{us / 1e6:.3g} s" if us >= 1e6 else f"{us / 1e3:.3g} ms" if us >= 1e3 else f"{us:.3g} us"
