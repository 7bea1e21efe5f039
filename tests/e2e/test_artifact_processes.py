"""Artifacts across processes: a fresh process loads them, races never break them (kills:
tests/e2e/test_kills.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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


def test_concurrent_savers_leave_one_complete_artifact(tmp_path, expected):
    target = str(tmp_path / "artifact")
    savers = [start("save", target, str(seed), "5") for seed in (1, 2)]
    for saver in savers:
        _, err = saver.communicate(timeout=240)
        assert saver.returncode == 0, err
    assert not [n for n in os.listdir(tmp_path) if n != "artifact"], "no staging directory is left behind"
    checked = run("check", target, expected[1], expected[2])
    assert checked.returncode == 0, checked.stderr


LOAD_BERT = """
import sys, torch, tensortorrent as tt
loaded = tt.load_compiled(sys.argv[1])
output = loaded(torch.load(sys.argv[2]))
print(type(output).__module__ + "." + type(output).__name__)
torch.testing.assert_close(output.last_hidden_state, torch.load(sys.argv[3]), rtol=1e-4, atol=1e-5)
"""


def test_a_new_process_loads_a_transformers_model_and_returns_its_output_class(tmp_path):
    """The program names transformers' output class; a process that never imported
    transformers (tensortorrent serve, say) still loads the artifact and rebuilds it."""
    import tensortorrent as tt
    from tiny_transformers import bert

    torch.manual_seed(0)
    model, ids = bert(), torch.randint(0, 128, (2, 8))
    tt.compile(model, (ids,)).save(tmp_path / "bert")
    torch.save(ids, tmp_path / "ids.pt")
    with torch.no_grad():
        torch.save(model(ids).last_hidden_state, tmp_path / "expected.pt")
    paths = [str(tmp_path / name) for name in ("bert", "ids.pt", "expected.pt")]
    done = subprocess.run(
        [sys.executable, "-c", LOAD_BERT, *paths],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("transformers.modeling_outputs.BaseModelOutputWithPoolingAndCrossAttentions")
