"""Artifacts across processes: a fresh process loads them, kills and races never break them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("artifact_worker.py")


def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(WORKER), *args], capture_output=True, text=True, timeout=timeout)


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.fixture(scope="module")
def expected(tmp_path_factory):
    """Eager outputs of model versions 1 and 2, computed here, in the test process."""
    sys.path.insert(0, str(WORKER.parent))
    from artifact_worker import expected_outputs

    folder = tmp_path_factory.mktemp("expected")
    paths = {seed: str(folder / f"v{seed}.safetensors") for seed in (1, 2)}
    for seed, path in paths.items():
        expected_outputs(seed, path)
    return paths


def test_a_new_process_loads_without_the_model(tmp_path, expected):
    target = str(tmp_path / "artifact")
    assert run("save", target, "1").returncode == 0
    checked = run("check", target, expected[1])
    assert checked.returncode == 0, checked.stderr
    assert "match" in checked.stdout


@pytest.mark.parametrize("delay_s", [0.0, 0.5, 1.2])
def test_a_killed_save_leaves_the_previous_artifact_loadable(tmp_path, expected, delay_s):
    target = str(tmp_path / "artifact")
    assert run("save", target, "1").returncode == 0
    saver = start("save", target, "2", "1000")  # saves version 2 over and over until killed
    # Kill after the import and compile (the first line of work), at a varying point of a save.
    deadline = time.monotonic() + 120
    while not any(name.startswith(".artifact.saving-") for name in os.listdir(tmp_path)):
        assert saver.poll() is None and time.monotonic() < deadline, saver.stderr.read() if saver.poll() else "timeout"
        time.sleep(0.01)
    time.sleep(delay_s)
    saver.send_signal(signal.SIGKILL)
    saver.wait()
    checked = run("check", target, expected[1], expected[2])
    assert checked.returncode == 0, checked.stderr


def test_concurrent_savers_leave_one_complete_artifact(tmp_path, expected):
    target = str(tmp_path / "artifact")
    savers = [start("save", target, str(seed), "5") for seed in (1, 2)]
    for saver in savers:
        _, err = saver.communicate(timeout=240)
        assert saver.returncode == 0, err
    assert not [n for n in os.listdir(tmp_path) if n != "artifact"], "no staging directory is left behind"
    checked = run("check", target, expected[1], expected[2])
    assert checked.returncode == 0, checked.stderr
