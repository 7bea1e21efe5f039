"""bench/overhead.py --quick runs and writes well-formed results (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_overhead_benchmark_quick_run(tmp_path):
    out = tmp_path / "overhead.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "overhead.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())
    assert set(results["executor_overhead"]) == {"native", "native_pool", "compiled_chain"}
    assert results["executor_overhead"]["compiled_chain"]["max_abs_error"] == 0
    for workload in results["latency"].values():
        assert workload["direct"]["uses_direct_path"] and not workload["executor"]["uses_direct_path"]
        assert workload["direct"]["max_abs_error"] < 1e-4
    assert results["machine"]["torch"] == __import__("torch").__version__


def test_artifact_load_benchmark_quick_run(tmp_path):
    out = tmp_path / "artifact_load.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "artifact_load.py"),
            "--quick",
            "--out",
            str(out),
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())
    assert results["max_abs_error"] == 0
    for condition in ("warm", "cold"):
        assert set(results[condition]) == {"read_files_once", "load_compiled", "load_compiled_unverified"}
    assert [p.name for p in tmp_path.iterdir()] == ["artifact_load.json"], "the scratch artifact is removed"


def test_planner_benchmark_quick_run(tmp_path):
    out = tmp_path / "planner.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "planner.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())
    assert 0 <= results["optimality"]["worst_gap"] and results["large"]["greedy_over_search"] > 0
