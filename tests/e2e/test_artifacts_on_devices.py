"""Artifacts of plans on devices: saved with the devices they were compiled for, loaded onto
them again (virtual devices declared again from the manifest), or onto the devices named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from test_virtual_devices import BATCH, WIDTH, Stack, fast_small, slow_large

import tensortorrent as tt
from conftest import eager_outputs
from tensortorrent.storage.file_digests import digest_file
from tiny_transformers import VOCAB, built, logits

MACHINE = [fast_small(), slow_large()]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Stack().eval()


@pytest.fixture(scope="module")
def saved(model, tmp_path_factory):
    """An artifact of the Stack planned on the two virtual devices, and its input."""
    x = torch.randn(BATCH, WIDTH)
    compiled = tt.compile(model, (x,), devices=["fast", "slow"], machine=MACHINE)
    assert set(compiled.region_devices) == {"fast", "slow"}
    return Path(compiled.save(tmp_path_factory.mktemp("on_devices") / "artifact")), x


def with_manifest(path: Path, copy: Path, change) -> Path:
    """A copy of the artifact at `path` with `change` applied to its manifest, its digests
    made to agree again (to reach the checks behind them)."""
    shutil.copytree(path, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    change(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    integrity = json.loads((copy / "integrity.json").read_text())
    integrity["files"] = {name: digest_file(str(copy / name)) for name in integrity["files"]}
    (copy / "integrity.json").write_text(json.dumps(integrity))
    return copy


def test_the_manifest_records_the_devices_with_their_declarations(saved):
    path, _ = saved
    manifest = json.loads((path / "manifest.json").read_text())
    assert [entry["name"] for entry in manifest["devices"]] == ["fast", "slow"]
    assert tt.VirtualDevice(**manifest["devices"][0]["virtual"]) == fast_small()


def test_loading_plans_onto_the_devices_it_was_compiled_for(model, saved):
    path, x = saved
    loaded = tt.load_compiled(path)  # no machine given: the manifest declares the devices again
    assert set(loaded.region_devices) <= {"fast", "slow"} and "fast" in loaded.region_devices
    torch.testing.assert_close(loaded(x), eager_outputs(model, (x,)))
    assert 0 < loaded.last_peak_bytes["fast"] <= fast_small().memory_bytes
    assert f"loaded from {path}: planned for fast, slow" in loaded.explain()


def test_devices_given_at_load_replace_the_saved_ones(model, saved):
    path, x = saved
    on_slow = tt.load_compiled(path, devices=["slow"])
    assert on_slow.region_devices == ["slow"] * len(model.layers)
    torch.testing.assert_close(on_slow(x), eager_outputs(model, (x,)))
    on_cpu = tt.load_compiled(path, devices="cpu")
    assert on_cpu.region_devices == ["cpu"] * len(model.layers)
    torch.testing.assert_close(on_cpu(x), eager_outputs(model, (x,)))
    assert "re-planned (the saved plan placed regions on fast, slow)" in on_cpu.explain()


def test_a_machine_given_at_load_replaces_a_saved_declaration(model, saved):
    path, x = saved
    roomy = tt.VirtualDevice("fast", memory_bytes=64 << 20, flops=1e9, link_bandwidth=10e6)
    loaded = tt.load_compiled(path, devices=["fast"], machine=roomy)
    assert loaded._plan.placement.machine.devices[0].declaration == roomy
    assert all(loaded._plan.placement.chosen.resident)  # it holds every layer now
    torch.testing.assert_close(loaded(x), eager_outputs(model, (x,)))


def test_a_saved_device_this_machine_lacks_is_left_out_and_said(model, saved, tmp_path):
    path, x = saved
    copy = with_manifest(path, tmp_path / "copy", lambda m: m.update(devices=[{"name": "cpu"}, {"name": "cuda:7"}]))
    loaded = tt.load_compiled(copy)
    assert loaded.region_devices == ["cpu"] * len(model.layers)
    torch.testing.assert_close(loaded(x), eager_outputs(model, (x,)))
    assert "compiled for cuda:7 too, which this machine lacks" in loaded.explain()


@pytest.mark.parametrize("weights", ["copy", "reference"])
def test_under_a_ram_budget_the_weights_stream_from_disk_onto_the_device(model, weights, tmp_path):
    """Loaded with a RAM budget, the weights stay in the artifact's file (or the files it
    references) and stream from there onto a device too small to hold them all, on every
    call, as from a checkpoint."""
    layer = (WIDTH * WIDTH + WIDTH) * 4
    small = tt.VirtualDevice("small", memory_bytes=3 * layer, flops=1e11, link_bandwidth=1e10)
    x = torch.randn(BATCH, WIDTH)
    config = tt.CompileConfig(ram_budget_bytes=2 * layer, spill_dir=str(tmp_path))
    source = tt.compile(model, (x,), config=config, devices=["small"], machine=small)
    loaded = tt.load_compiled(source.save(tmp_path / "artifact", weights=weights))
    assert set(loaded.region_devices) == {"small"} and loaded._plane.streams
    for _ in range(2):
        torch.testing.assert_close(loaded(x), eager_outputs(model, (x,)))
        assert loaded.last_report.bytes_read == loaded._plane.plan.streamed_bytes > 0
    assert 0 < loaded.last_peak_bytes["ram"] <= 2 * layer
    assert 0 < loaded.last_peak_bytes["small"] <= small.memory_bytes


def test_an_activation_budget_with_devices_is_refused_as_at_compile(saved):
    path, _ = saved
    config = tt.CompileConfig(activation_budget_bytes=1 << 20)
    with pytest.raises(tt.UnsupportedError, match="tt.load_compiled: activations spill from CPU regions only today"):
        tt.load_compiled(path, config=config)
    assert set(tt.load_compiled(path, config=config, devices="cpu").region_devices) == {"cpu"}


def test_an_artifact_from_before_devices_were_recorded_replays_on_the_cpu(model, tmp_path):
    x = torch.randn(BATCH, WIDTH)
    cpu = Path(tt.compile(model, (x,), devices="cpu").save(tmp_path / "cpu"))
    old = with_manifest(cpu, tmp_path / "old", lambda m: m.pop("devices"))
    loaded = tt.load_compiled(old)
    assert loaded.region_devices == ["cpu"] * len(model.layers)
    assert "saved plan replayed" in loaded.explain()
    torch.testing.assert_close(loaded(x), eager_outputs(model, (x,)))


def test_a_malformed_devices_entry_is_an_artifact_error(saved, tmp_path):
    path, _ = saved
    copy = with_manifest(path, tmp_path / "copy", lambda m: m.update(devices=[{"name": "fast", "virtual": {}}]))
    with pytest.raises(tt.ArtifactError, match="manifest.json: unreadable devices"):
        tt.load_compiled(copy)


def test_gpt2_saved_on_a_virtual_device_loads_onto_it_and_matches_eager(tmp_path):
    torch.manual_seed(0)
    model = built("gpt2")
    ids = torch.randint(0, VOCAB, (2, 16))
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    device = tt.VirtualDevice("vgpu", memory_bytes=int(weights * 0.6), flops=1e12, link_bandwidth=1e10)
    compiled = tt.compile(model, (ids,), devices=["vgpu"], machine=device)
    loaded = tt.load_compiled(compiled.save(tmp_path / "gpt2"))
    assert set(loaded.region_devices) == {"vgpu"}
    assert not all(loaded._plan.placement.chosen.resident)  # 60% of the weights fit: the rest stream
    torch.testing.assert_close(logits(loaded(ids)), logits(eager_outputs(model, (ids,))), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "devices, machine, match",
    [
        (5, None, "tt.load_compiled: devices: expected 'auto', 'cpu', a declared virtual device's name"),
        (["nowhere"], None, "tt.load_compiled: devices: unknown device 'nowhere'; known: 'cpu', 'fast', 'slow'"),
        (None, "fast", "tt.load_compiled: machine: expected a tt.VirtualDevice or a list of them, got str"),
    ],
)
def test_bad_devices_or_machine_at_load_are_named(saved, devices, machine, match):
    path, _ = saved
    with pytest.raises(tt.InvalidArgumentError, match=match):
        tt.load_compiled(path, devices=devices, machine=machine)
