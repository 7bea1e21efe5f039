"""compiled.visualize(): one self-contained HTML page of the plan, for every kind of plan
(the direct path, a multi-region CPU plan, virtual devices, weights streamed from disk),
checked by parsing the file and by rendering it in headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from torch import nn

import tensortorrent as tt
from tensortorrent import _core
from tensortorrent.units import format_bytes

WIDTH, BATCH = 64, 4
KINDS = ["direct", "multi_region", "virtual_devices", "streamed"]
# Per kind: queues whose lanes the page must have, and its memory tiers.
LANES = {
    "direct": {"cpu"},
    "multi_region": {"cpu"},
    "virtual_devices": {"dev0", "dev0.h2d"},
    "streamed": {"cpu", "io"},
}
TIERS = {"direct": ["ram"], "multi_region": ["ram"], "virtual_devices": ["ram", "dev0"], "streamed": ["ram", "disk"]}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def mlp(layers: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.GELU()) for _ in range(layers)]).eval()


def compile_kind(kind: str, spill_dir: Path) -> tt.CompiledModule:
    x = torch.randn(BATCH, WIDTH)
    if kind == "direct":
        compiled = tt.compile(mlp(1), (x,))
        assert compiled.uses_direct_path
    elif kind == "multi_region":
        compiled = tt.compile(mlp(3), (x,), config=tt.CompileConfig(prefer_direct_path=False))
        assert not compiled.uses_direct_path and compiled.region_count == 3
    elif kind == "virtual_devices":
        device = tt.VirtualDevice("dev0", memory_bytes=64 << 20, flops=1e9, link_bandwidth=1e9)
        compiled = tt.compile(mlp(3), (x,), devices=["cpu", "dev0"], machine=device)
        assert "dev0" in compiled.region_devices
    else:
        model = mlp(6)
        budget = sum(p.numel() * p.element_size() for p in model.parameters()) // 3
        compiled = tt.compile(model, (x,), config=tt.CompileConfig(ram_budget_bytes=budget, spill_dir=str(spill_dir)))
        assert compiled.streams_weights
    return compiled


@dataclass
class Plan:
    kind: str
    compiled: tt.CompiledModule
    before: Path  # the page written before any call
    after: Path  # the page written after one call


@pytest.fixture(scope="module", params=KINDS)
def plan(request, tmp_path_factory) -> Plan:
    directory = tmp_path_factory.mktemp(request.param)
    compiled = compile_kind(request.param, directory / "spill")
    before = compiled.visualize(directory / "before.html")
    compiled(torch.randn(BATCH, WIDTH))
    after = compiled.visualize(directory / "after.html")
    assert after == str(directory / "after.html")
    return Plan(request.param, compiled, Path(before), Path(after))


class Page(HTMLParser):
    """A written page, parsed: its tags, bars, lanes, memory charts, tables and text."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.bars: list[dict] = []
        self.lanes: list[str] = []
        self.tiers: list[str] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.texts: list[str] = []
        self._lane = self._table = self._cell = None
        self.source = path.read_text(encoding="utf-8")
        self.feed(self.source)
        self.close()

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        classes = (attributes.get("class") or "").split()
        if tag == "g" and "lane" in classes:
            self._lane = attributes["data-lane"]
            self.lanes.append(self._lane)
        elif tag == "rect" and "bar" in classes:
            self.bars.append({"id": int(attributes["data-id"]), "source": classes[1], "lane": self._lane})
        elif tag == "svg" and "memory" in classes:
            self.tiers.append(attributes["data-tier"])
        elif tag == "table":
            self._table = self.tables.setdefault(attributes["class"], [])
        elif tag == "tr":
            self._table.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "g":
            self._lane = None
        elif tag in ("td", "th"):
            self._table[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        self.texts.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def bars_of(self, source: str) -> list[dict]:
        return [bar for bar in self.bars if bar["source"] == source]

    def column(self, table: str, header: str) -> dict[str, str]:
        """A table's column by its first cell (the row's name)."""
        head, *rows = self.tables[table]
        return {row[0]: row[head.index(header)] for row in rows}


def program_of(compiled: tt.CompiledModule):
    """The instructions the page draws, and the Program whose queues they run on (None: the direct path)."""
    if compiled._plane is None:
        return compiled._plan.schedule.instructions, None
    program = compiled._plane.plan.program
    return program.schedule.instructions, program


def queue_names(compiled: tt.CompiledModule) -> set[str]:
    instructions, program = program_of(compiled)
    if program is None:
        return {i.device for i in instructions}
    return {program.queues[i.queue].name for i in instructions}


def test_the_page_loads_nothing_from_the_network(plan):
    for path in (plan.before, plan.after):
        page = Page(path)
        assert "http://" not in page.source and "https://" not in page.source
        assert "url(" not in page.source and "@import" not in page.source
        for tag, attributes in page.tags:
            assert tag not in ("link", "img", "iframe", "object", "embed"), tag
            assert "src" not in attributes and "href" not in attributes, (tag, attributes)
        assert [tag for tag, _ in page.tags].count("script") == 1


def test_the_page_has_one_lane_per_queue_the_plan_uses(plan):
    page = Page(plan.after)
    assert len(page.lanes) == len(set(page.lanes))
    assert set(page.lanes) == queue_names(plan.compiled)
    assert LANES[plan.kind] <= set(page.lanes)


def test_every_instruction_is_a_predicted_bar_and_the_last_call_is_measured_beside_it(plan):
    page = Page(plan.after)
    instructions, _ = program_of(plan.compiled)
    predicted = page.bars_of("predicted")
    assert sorted(bar["id"] for bar in predicted) == sorted(i.id for i in instructions)
    records = [r for r in plan.compiled.last_report.records if r.ran]
    measured = page.bars_of("measured")
    assert sorted(bar["id"] for bar in measured) == sorted(r.id for r in records) and records
    lane_of = {bar["id"]: bar["lane"] for bar in predicted}
    assert all(bar["lane"] == lane_of[bar["id"]] for bar in measured), "measured bars sit in their queue's lane"
    kinds = page.column("kinds", "instructions")
    expected = {}
    for i in instructions:
        expected[i.kind.name.lower()] = expected.get(i.kind.name.lower(), 0) + 1
    assert {kind: int(count) for kind, count in kinds.items()} == expected
    assert "-" not in page.column("kinds", "measured, last call (summed)").values()
    assert "Last call:" in page.source and "No call has run yet" not in page.source


def test_before_any_call_the_page_says_so_and_shows_the_prediction(plan):
    page = Page(plan.before)
    assert "No call has run yet" in page.source
    assert page.bars_of("measured") == []
    assert len(page.bars_of("predicted")) == len(program_of(plan.compiled)[0])
    assert set(page.column("kinds", "measured, last call (summed)").values()) == {"-"}


def test_memory_per_tier_as_simulated_beside_the_measured_peaks(plan):
    page = Page(plan.after)
    assert page.tiers == TIERS[plan.kind]
    measured = page.column("peaks", "measured (last call)")
    peaks = plan.compiled.last_peak_bytes
    if plan.kind == "direct":
        assert peaks == {} and set(measured.values()) == {"-"}
    else:
        assert peaks and all(measured[tier] == format_bytes(peak) for tier, peak in peaks.items())
    # The curve counts bytes as the simulator does: simulating the Program again, each
    # instruction held to its predicted start and duration, gives the same peaks.
    _, program = program_of(plan.compiled)
    program = program or plan.compiled._plan.placement.chosen.program.program
    times = [(max(i.predicted_start_us, 0.0), max(i.predicted_end_us, 0.0)) for i in program.schedule.instructions]
    derived = [i for i in program.schedule.instructions if i.predicted_end_us < 0]
    assert all(i.kind == _core.InstructionKind.Free for i in derived), "only frees may lack a prediction"
    simulated = _core.simulate_program(
        program,
        [(end - start) / 1e6 if end > start else 0.0 for start, end in times],
        earliest_start_s=[start / 1e6 for start, _ in times],
    )
    predicted = page.column("peaks", "predicted peak (this curve)")
    for tier, peak in zip(program.tiers, simulated.peak_bytes):
        if tier.kind != _core.TierKind.Disk:
            assert predicted[tier.name] == format_bytes(peak), tier.name


def test_regions_with_their_devices_and_times(plan):
    page = Page(plan.after)
    devices = page.column("regions", "device")
    assert list(devices.values()) == plan.compiled.region_devices
    assert all(value != "-" for value in page.column("regions", "predicted").values())
    assert all(value != "-" for value in page.column("regions", "measured, last call").values())
    profiled = [cost.cpu_seconds is not None for cost in plan.compiled.region_costs]
    assert [value != "-" for value in page.column("regions", "cpu time profiled").values()] == profiled


def test_labels_are_escaped(tmp_path):
    named = type('Net<b>&"x"', (nn.Sequential,), {})
    compiled = tt.compile(named(nn.Linear(WIDTH, WIDTH)).eval(), (torch.randn(BATCH, WIDTH),))
    page = Page(Path(compiled.visualize(tmp_path / "plan.html")))
    assert "<b>" not in page.source and "Net&lt;b&gt;&amp;&quot;x&quot;" in page.source
    assert 'TensorTorrent plan for Net<b>&"x"' in "".join(page.texts)


def test_a_path_that_cannot_be_written_raises_and_leaves_nothing_behind(tmp_path):
    compiled = compile_kind("direct", tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(tt.TensorTorrentError, match="visualize: cannot write .*a-file"):
        compiled.visualize(blocker / "plan.html")
    occupied = tmp_path / "a-directory"
    occupied.mkdir()
    with pytest.raises(tt.TensorTorrentError, match="visualize: cannot write .*a-directory"):
        compiled.visualize(occupied)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-directory", "a-file"], "no temporary file remains"
    assert list(occupied.iterdir()) == [] and blocker.read_text() == "not a directory"
    # A folder not created yet is created, as for trace().
    assert os.path.isfile(compiled.visualize(tmp_path / "new" / "plan.html"))


def colored_pixels(png: Path, rows: range) -> int:
    """Pixels of saturated colour (the bars; text and grid lines are grey) in `rows` of an
    8-bit RGB(A) PNG, decoded with the standard library."""
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, compressed = 8, bytearray()
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position : position + 8])
        body = data[position + 8 : position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            compressed += body
    assert depth == 8 and color in (2, 6) and interlace == 0
    step = 3 if color == 2 else 4
    raw, stride = zlib.decompress(compressed), width * step
    previous, count = bytearray(stride), 0
    for y in range(min(rows.stop, height)):
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        unfilter(line, previous, raw[y * (stride + 1)], step)
        if y in rows:
            count += sum(max(px) - min(px) > 40 for px in zip(line[0::step], line[1::step], line[2::step]))
        previous = line
    return count


def unfilter(line: bytearray, previous: bytearray, kind: int, step: int) -> None:
    """Reverses a PNG scanline filter in place (PNG spec, section 9)."""
    for i in range(len(line)):
        left = line[i - step] if i >= step else 0
        up, corner = previous[i], previous[i - step] if i >= step else 0
        if kind == 1:
            line[i] = (line[i] + left) & 255
        elif kind == 2:
            line[i] = (line[i] + up) & 255
        elif kind == 3:
            line[i] = (line[i] + (left + up) // 2) & 255
        elif kind == 4:
            guess = left + up - corner
            nearest = min((abs(guess - left), 0, left), (abs(guess - up), 1, up), (abs(guess - corner), 2, corner))
            line[i] = (line[i] + nearest[2]) & 255


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (make system-deps installs it)")
def test_the_page_renders_in_headless_chromium_without_errors(plan, tmp_path):
    for page in (plan.after, plan.before) if plan.kind == "direct" else (plan.after,):
        screenshot = tmp_path / f"{page.stem}.png"
        result = subprocess.run(
            [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr", "--v=0"]
            + [f"--screenshot={screenshot}", "--window-size=1400,1000", "--dump-dom", page.as_uri()],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
        assert console == [], console
        body = re.search(r"<body[^>]*>", result.stdout)
        assert body is not None and body.group(0) == '<body data-rendered="1">', "the page's script ran without error"
        # The timeline's bars lie between the heading and the tables below it.
        assert colored_pixels(screenshot, range(150, 450)) > 2000
