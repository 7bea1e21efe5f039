"""`tensortorrent doctor --json` and `validate-hardware` on this (CPU-only) machine, and how the
command reports a user's error: one line on stderr and status 2."""

from __future__ import annotations

import json
import subprocess
import sys

from tensortorrent.cli.main import main
from tensortorrent.storage import read_mode_cache

BUDGET_KEYS = {"tier", "amount", "source", "detail", "raw"}


def test_doctor_json_schema(tmp_path, capsys):
    path = tmp_path / "doctor.json"
    status = main(["doctor", "--json", str(path), "--no-bandwidth"])
    data = json.loads(path.read_text())
    assert status == (0 if data["healthy"] else 1)
    assert set(data) >= {
        "tensortorrent",
        "torch",
        "fingerprint",
        "host",
        "devices",
        "absent",
        "budgets",
        "disk",
        "read_modes",
        "checks",
    }
    assert set(data["host"]) == {"cpus", "memory", "cgroup", "numa"}
    assert data["host"]["memory"]["transparent_huge_pages"] in {"always", "madvise", "never", None}
    assert data["devices"][0]["name"] == "cpu"
    assert {b["tier"] for b in data["budgets"]} >= {"ram", "disk", "cpu"}
    assert all(
        set(b) == BUDGET_KEYS and b["source"] in {"config", "environment", "cgroup", "os"} for b in data["budgets"]
    )
    assert all({"name", "ok", "detail"} == set(c) for c in data["checks"])
    out = capsys.readouterr().out
    assert "Budgets" in out and "huge pages" in out


def test_doctor_measures_the_spill_directory(tmp_path):
    path = tmp_path / "doctor.json"
    main(["doctor", "--json", str(path)])
    disk = json.loads(path.read_text())["disk"]
    assert disk["read_bytes_per_second"] > 0 and disk["free_bytes"] <= disk["total_bytes"]


def test_doctor_shows_the_read_modes_streaming_compiles_measured(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TT_SPILL_DIR", str(tmp_path))
    mode = dict(mode="auto", threads=4, request_bytes=16 << 20, measured_gbps=1.25, reason="the fastest")
    read_mode_cache.remember("8:16", mode)
    path = tmp_path / "doctor.json"
    main(["doctor", "--json", str(path), "--no-bandwidth"])
    assert json.loads(path.read_text())["read_modes"]["8:16"]["measured_gbps"] == 1.25
    assert "weights on device 8:16 read auto with 4 thread(s) at 1.25 GB/s" in capsys.readouterr().out


def test_validate_hardware_on_the_cpu(tmp_path, capsys):
    path = tmp_path / "report.json"
    assert main(["validate-hardware", "--output", str(path)]) == 0
    data = json.loads(path.read_text())
    cpu = next(d for d in data["devices"] if d["device"] == "cpu")
    assert cpu["verdict"] == "validated" and all(check["ok"] for check in cpu["checks"])
    import torch

    if not torch.cuda.is_available():
        assert {"kind": "cuda", "status": "absent"} in data["absent"]
    assert "cpu" in capsys.readouterr().out


def test_validate_hardware_validates_a_backends_device_with_its_transfers(tmp_path, plugins_from):
    plugins_from("good")  # the example backend: example:0, in host memory
    path = tmp_path / "report.json"
    assert main(["validate-hardware", "--output", str(path)]) == 0
    example = next(d for d in json.loads(path.read_text())["devices"] if d["device"] == "example:0")
    assert example["verdict"] == "validated"
    checks = {check["name"]: check["detail"] for check in example["checks"]}
    assert checks["backend conformance"].endswith("checks of the example backend passed")
    numerics = checks["tensortorrent vs eager"]
    assert "direct path" in numerics and "data plane" in numerics and "weights copied per call" in numerics
    copied = numerics.split("weights copied per call (")[1]
    assert not copied.split(", ")[1].startswith("0 bytes"), "the small budget moves weights on every call"


def test_reports_go_into_folders_that_do_not_exist_yet(tmp_path):
    doctor = tmp_path / "out" / "deeper" / "x.json"
    main(["doctor", "--json", str(doctor), "--no-bandwidth"])
    assert json.loads(doctor.read_text())["devices"][0]["name"] == "cpu"
    validate = tmp_path / "artifacts" / "report.json"
    assert main(["validate-hardware", "--output", str(validate)]) == 0
    assert json.loads(validate.read_text())["ok"] is True


def test_an_unwritable_report_path_is_one_line_and_status_2(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    target = tmp_path / "file" / "x.json"  # a folder cannot be made under a file
    assert main(["doctor", "--json", str(target), "--no-bandwidth"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tensortorrent: error: ") and str(tmp_path / "file") in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_verbose_shows_the_traceback(tmp_path, capsys):
    assert main(["-v", "explain", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "tensortorrent.errors.ArtifactError" in err
    assert err.endswith(f"tensortorrent: error: {tmp_path / 'nowhere'}: no artifact directory there\n")


def test_the_command_exits_2_without_a_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "tensortorrent.cli.main", "explain", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr == f"tensortorrent: error: {tmp_path / 'nowhere'}: no artifact directory there\n"


def test_doctor_leaves_no_spill_folder_it_made_to_look_and_cache_refuses_a_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TT_SPILL_DIR", str(tmp_path / "spill" / "nested"))
    main(["doctor", "--json", str(tmp_path / "doctor.json")])
    assert json.loads((tmp_path / "doctor.json").read_text())["disk"]["read_bytes_per_second"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doctor.json"], "the first spill creates the folder"
    assert main(["cache", "list", "--spill-dir", str(tmp_path / "doctor.json")]) == 2
    assert "doctor.json is a file, not a spill directory" in capsys.readouterr().err
