"""`tensortorrent explain ARTIFACT`: a saved plan from the manifest alone, and the replay verdict."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import tensortorrent as tt
from tensortorrent.cli.main import main

SPLIT = tt.CompileConfig(max_region_nodes=1)


@pytest.fixture
def artifact(tmp_path):
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).eval()
    tt.compile(model, example_inputs=(torch.randn(2, 8),), config=SPLIT).save(tmp_path / "artifact")
    return tmp_path / "artifact"


def test_text_names_the_regions_schedule_and_replay(artifact, capsys):
    assert main(["explain", str(artifact)]) == 0
    out = capsys.readouterr().out
    assert "TensorTorrent plan for Sequential" in out
    assert "the saved plan would be replayed" in out and "compiled for: cpu" in out
    assert all(f"r{i}" in out for i in range(3)) and "Schedule" in out and "Direct path: not taken" in out
    assert "saved plan replayed" in tt.load_compiled(artifact).explain()  # what load does agrees


def test_json_holds_the_manifest_plan_and_the_verdict(artifact, capsys):
    assert main(["explain", str(artifact), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    manifest = json.loads((artifact / "manifest.json").read_text())
    for key in ("plan", "regions", "schedule", "predicted_costs"):
        assert data[key] == manifest[key]
    assert data["on_this_machine"]["action"] == "replay" and data["devices"] == ["cpu"]
    assert data["on_this_machine"]["saved_fingerprint"] == manifest["hardware_fingerprint"]["digest"]


def test_a_plan_on_devices_names_them_and_would_be_planned_again(tmp_path, capsys):
    device = tt.VirtualDevice("vdev", memory_bytes=1 << 20, flops=1e9, link_bandwidth=1e9)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()
    compiled = tt.compile(model, (torch.randn(2, 8),), devices=["vdev"], machine=device)
    assert main(["explain", compiled.save(tmp_path / "artifact")]) == 0
    out = capsys.readouterr().out
    assert "compiled for: vdev (virtual)" in out
    assert "it would be re-planned (the saved plan placed regions on vdev)" in out
    assert "copy     inputs out -> vdev" in out  # the saved schedule keeps its copies' kind


def test_another_machine_would_re_plan_as_load_does(artifact, capsys, monkeypatch):
    other = lambda: {"digest": "another-machine"}  # noqa: E731
    monkeypatch.setattr("tensortorrent.cli.explain.hardware_fingerprint", other)
    monkeypatch.setattr("tensortorrent.load.program.hardware_fingerprint", other)
    assert main(["explain", str(artifact), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["on_this_machine"]["action"] == "re-plan"
    assert main(["explain", str(artifact)]) == 0
    assert "it would be re-planned (saved on hardware fingerprint" in capsys.readouterr().out
    assert "re-planned" in tt.load_compiled(artifact).explain()


def test_the_weights_are_not_read(artifact, capsys):
    weights = artifact / "weights.safetensors"
    weights.write_bytes(b"\0" * weights.stat().st_size)  # damaged: loading would fail its digest
    assert main(["explain", str(artifact)]) == 0
    with pytest.raises(tt.ArtifactError, match="weights.safetensors: sha256 differs"):
        tt.load_compiled(artifact)


def test_a_missing_artifact_is_one_line_and_status_2(tmp_path, capsys):
    assert main(["explain", str(tmp_path / "nowhere")]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"tensortorrent: error: {tmp_path / 'nowhere'}: no artifact directory there\n"
    assert captured.out == ""


def test_a_broken_manifest_is_one_line_and_status_2(artifact, capsys):
    (artifact / "manifest.json").write_text("{not json")
    assert main(["explain", str(artifact)]) == 2
    assert "tensortorrent: error: manifest.json: size 9 bytes, expected" in capsys.readouterr().err
    assert main(["explain", str(artifact), "--no-verify"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tensortorrent: error: manifest.json: not valid JSON") and err.count("\n") == 1


def test_a_malformed_schedule_is_an_artifact_error(artifact, capsys):
    manifest = json.loads((artifact / "manifest.json").read_text())
    manifest["schedule"][0]["deps"] = [99]
    (artifact / "manifest.json").write_text(json.dumps(manifest))
    assert main(["explain", str(artifact), "--no-verify"]) == 2
    assert "unreadable regions, plan or schedule" in capsys.readouterr().err
