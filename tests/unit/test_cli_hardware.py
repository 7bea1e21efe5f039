"""`tensortorrent doctor --json` and `validate-hardware` on this (CPU-only) machine."""

from __future__ import annotations

import json

from tensortorrent.cli.main import main

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
        "checks",
    }
    assert set(data["host"]) == {"cpus", "memory", "cgroup", "numa"}
    assert data["devices"][0]["name"] == "cpu"
    assert {b["tier"] for b in data["budgets"]} >= {"ram", "disk", "cpu"}
    assert all(
        set(b) == BUDGET_KEYS and b["source"] in {"config", "environment", "cgroup", "os"} for b in data["budgets"]
    )
    assert all({"name", "ok", "detail"} == set(c) for c in data["checks"])
    assert "Budgets" in capsys.readouterr().out


def test_doctor_measures_the_spill_directory(tmp_path):
    path = tmp_path / "doctor.json"
    main(["doctor", "--json", str(path)])
    disk = json.loads(path.read_text())["disk"]
    assert disk["read_bytes_per_second"] > 0 and disk["free_bytes"] <= disk["total_bytes"]


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
