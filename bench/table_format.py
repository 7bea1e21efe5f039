"""Formatting shared by the README's benchmark tables (bench/tables.py and its suites'
renderers): times and sizes to three significant digits, Markdown tables, errors as
one-line notes, and the line naming where and when a run was measured."""

from __future__ import annotations

from datetime import datetime, timezone

ERROR_CHARS = 300  # of an error in a note under a table; the results file keeps it whole
NOT_OK = {"failed": "failed", "missing": "missing (not installed)", "skipped": "skipped"}


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
