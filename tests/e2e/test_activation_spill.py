"""CompileConfig(activation_budget_bytes=...): activations beyond the budget are spilled to disk
and read back before use; outputs match eager, and no spilled byte outlives its call."""

from __future__ import annotations

import os
import re
import subprocess
import threading

import pytest
import torch
from torch import nn

import tensortorrent as tt
from conftest import eager_outputs, probe, wait_until
from tiny_transformers import MODELS, VOCAB, logits, meta_model, saved_model

WIDTH, ROWS = 256, 64
ACTIVATION = WIDTH * ROWS * 4  # bytes of one fp32 activation of SkipChain


class SkipChain(nn.Module):
    """linear -> probe(0) -> linear -> probe(1) ..., the first two outputs added back at the
    end: with one op per region, both stay live across every region between (a
    transformer's residual stream, stretched)."""

    def __init__(self, stages: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(stages + 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = self.layers[0](x)
        second = self.layers[1](first)
        h = second
        for tag, layer in enumerate(self.layers[2:]):
            h = probe(layer(h), tag)
        return h + first + second


def spilling_chain(spill_dir, **config):
    """SkipChain compiled to hold three activations in RAM (its largest region's working
    set): `second`, read last, spills while the middle computes."""
    torch.manual_seed(0)
    model = SkipChain().eval()
    x = torch.randn(ROWS, WIDTH)
    settings = dict(max_region_nodes=1, activation_budget_bytes=3 * ACTIVATION, spill_dir=spill_dir and str(spill_dir))
    compiled = tt.compile(model, (x,), config=tt.CompileConfig(**(settings | config)))
    return model, x, compiled


def spilled_bytes_on_disk(folder) -> int:
    """Bytes in this process's open spill files under `folder` (anonymous files: only their
    descriptors find them)."""
    total = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder)):
                total += os.stat(f"/proc/self/fd/{fd}").st_size
        except OSError:
            continue  # the descriptor listdir itself used, closed by now
    return total


def spilled_while_running(folder, least: int) -> int:
    """Spilled bytes under `folder` once `least` are there (the spill runs on the I/O engine,
    beside the region that asks), or what is there after a while."""
    wait_until(lambda: spilled_bytes_on_disk(folder) >= least, every_s=0.001)
    return spilled_bytes_on_disk(folder)


def test_activations_beyond_the_budget_spill_and_the_outputs_match_eager(tmp_path, hooks):
    model, x, compiled = spilling_chain(tmp_path)
    expected = eager_outputs(model, (x,))
    seen = []
    hooks.on_probe = lambda tag: seen.append(spilled_while_running(tmp_path, ACTIVATION)) if tag == 2 else None
    for _ in range(2):
        torch.testing.assert_close(compiled(x), expected)
    assert seen == [ACTIVATION, ACTIVATION], "`second` is on disk while the middle computes"
    assert spilled_bytes_on_disk(tmp_path) == 0, "a call's spill files are emptied when it ends"
    assert re.search(r"Activations spilled: 1 value\(s\), 64\.0 KiB written and 1 reload\(s\)", compiled.explain())
    memory = compiled._plane.plan.program.memory_plan
    assert memory.peak_bytes[0] - memory.resident_bytes[0] <= 3 * ACTIVATION, "activations live in plan order"
    assert compiled.last_peak_bytes["ram"] == memory.arena_bytes[0], "the call holds what the plan says"
    unbounded = spilling_chain(tmp_path, activation_budget_bytes=None)[2]
    assert "Activations spilled" not in unbounded.explain()
    # Activations only: the resident part differs between the two compiles wherever a
    # region's products timed faster on weights packed once (held in RAM, measured each time).
    unbounded_memory = unbounded._plane.plan.program.memory_plan
    assert unbounded_memory.peak_bytes[0] - unbounded_memory.resident_bytes[0] > 3 * ACTIVATION


@pytest.mark.parametrize("stop", ["error", "cancel inside a region", "cancel from another thread"])
def test_a_failed_or_cancelled_call_leaves_no_spilled_byte_nor_buffer(tmp_path, hooks, stop):
    model, x, compiled = spilling_chain(tmp_path)
    expected = eager_outputs(model, (x,))
    plane, residents = compiled._plane.plane, list(compiled._plane.plan.program.memory_plan.resident_bytes)
    on_disk, spilled, cancelled = [], threading.Event(), threading.Event()

    def interrupt(tag):
        if tag == 2:
            on_disk.append(spilled_while_running(tmp_path, ACTIVATION))
            if stop == "error":
                raise RuntimeError("region failed")
            if stop == "cancel inside a region":
                compiled.request_cancel()
            spilled.set()
            assert cancelled.wait(timeout=30)

    hooks.on_probe = interrupt
    handle = compiled.submit(x)
    if stop == "cancel from another thread":
        assert spilled.wait(timeout=30)
        handle.cancel()
    cancelled.set()
    with pytest.raises(RuntimeError if stop == "error" else tt.ExecutionCancelled):
        handle.result(timeout=60)
    assert on_disk == [ACTIVATION]
    assert spilled_bytes_on_disk(tmp_path) == 0
    assert [plane.held(tier) for tier in range(len(residents))] == residents, "every call buffer given back"
    hooks.on_probe = None
    torch.testing.assert_close(compiled(x), expected)


@pytest.mark.parametrize("name", list(MODELS))
def test_transformers_spill_and_match_eager(name, tmp_path):
    torch.manual_seed(0)
    cls, config = MODELS[name]
    model = cls(config()).eval()
    ids = torch.randint(0, VOCAB, (2, 16))
    compiled = compile_at_smallest_budget(model, (ids,), spill_dir=str(tmp_path), max_region_nodes=6)
    assert "Activations spilled" in compiled.explain()
    torch.testing.assert_close(logits(compiled(ids)), logits(eager_outputs(model, (ids,))))


def compile_at_smallest_budget(model, inputs, checkpoint=None, **config):
    """Compiles at the smallest activation budget that fits: its largest region's working
    set, as the error of a smaller budget names it."""
    with pytest.raises(tt.MemoryCapacityError) as error:
        tt.compile(model, inputs, checkpoint=checkpoint, config=tt.CompileConfig(activation_budget_bytes=1, **config))
    needed = int(re.search(r"working set of a region: '[^']+' reads and writes (\d+) bytes", str(error.value)).group(1))
    settings = tt.CompileConfig(activation_budget_bytes=needed, **config)
    return tt.compile(model, inputs, checkpoint=checkpoint, config=settings)


def test_activations_spill_while_weights_stream_from_a_checkpoint(tmp_path):
    eager = saved_model("llama", tmp_path, sharded=True)
    ids = torch.randint(0, VOCAB, (2, 16))
    weights = sum(t.numel() * t.element_size() for t in eager.state_dict().values())
    compiled = compile_at_smallest_budget(
        meta_model("llama"),
        (ids,),
        checkpoint=tmp_path,
        ram_budget_bytes=weights // 2,
        max_region_nodes=6,
        spill_dir=str(tmp_path / "spill"),
    )
    text = compiled.explain()
    assert "Weights streamed from disk" in text and "Activations spilled" in text
    for _ in range(2):
        torch.testing.assert_close(logits(compiled(ids)), logits(eager_outputs(eager, (ids,))))
    assert compiled.last_report.bytes_read > 0 and compiled.last_peak_bytes["ram"] <= weights // 2


def test_a_budget_below_a_regions_working_set_names_both_figures(tmp_path):
    with pytest.raises(tt.MemoryCapacityError) as error:
        spilling_chain(tmp_path, activation_budget_bytes=ACTIVATION)
    assert str(error.value).startswith(
        "activation_budget_bytes=65536 (64.0 KiB) is below the largest working set of a region: 'r10' reads "
        "and writes 196608 bytes (192.0 KiB) of activations"
    )


def test_a_spill_directory_in_ram_is_refused_unless_allowed(tmp_path):
    if not os.path.isdir("/dev/shm") or not tt.core.probe_disk("/dev/shm").in_memory:
        pytest.skip("no tmpfs at /dev/shm on this machine")
    folder = f"/dev/shm/tt-test-spill-{os.getpid()}"
    with pytest.raises(tt.ConfigValueError, match="held in RAM"):
        spilling_chain(folder)
    assert not os.path.exists(folder), "a refused spill directory is not created"
    model, x, compiled = spilling_chain(folder, allow_tmpfs_spill=True)
    try:
        torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))
    finally:
        del compiled
        subprocess.run(["rm", "-rf", folder], check=True)


def test_the_spill_directory_comes_from_tt_spill_dir_when_the_config_names_none(tmp_path, monkeypatch):
    monkeypatch.setenv("TT_SPILL_DIR", str(tmp_path))
    _, _, compiled = spilling_chain(None)
    assert compiled._plane.spill_dir.startswith(str(tmp_path / "spill") + os.sep)


def test_the_folders_of_dead_processes_are_removed(tmp_path):
    parent = tmp_path / "spill"
    dead = [parent / "999999999-1", parent / f"{os.getpid()}-1"]  # no such process; a reused pid
    for folder in dead:
        folder.mkdir(parents=True)
        (folder / "leftover").write_bytes(b"x")
    (parent / "notes").mkdir()  # not named as a process's: left alone
    spilling_chain(tmp_path)
    assert sorted(p.name for p in parent.iterdir()) == sorted(["notes", os.path.basename(own_folder(parent))])


def own_folder(parent) -> str:
    (mine,) = [p for p in parent.iterdir() if p.name.startswith(f"{os.getpid()}-")]
    return str(mine)


def test_a_disk_that_fills_while_spilling_fails_the_call_and_leaves_nothing(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32k", "tt-test", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {made.stderr.decode().strip()}")
    try:
        model, x, compiled = spilling_chain(mount, allow_tmpfs_spill=True)  # it spills 64 KiB
        with pytest.raises(tt.StorageError, match="spill file"):
            compiled(x)
        assert [files for _, _, files in os.walk(mount) if files] == [], "no file left behind"
        assert spilled_bytes_on_disk(mount) == 0
        subprocess.run(["mount", "-o", "remount,size=1m", str(mount)], check=True)
        torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))
        del compiled
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)
