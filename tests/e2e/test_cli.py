"""The `tensortorrent demo` command compiles a Llama-style decoder and reports parity and time."""

from __future__ import annotations

import pytest

from tensortorrent.cli.main import main

pytest.importorskip("transformers")


def test_demo_runs_small(capsys):
    assert main(["demo", "--layers", "2", "--hidden", "64", "--seq", "8", "--runs", "2"]) == 0
    out = capsys.readouterr().out
    # A short story, three parts: what ran, how fast against eager and the disk bound, where the weights lived.
    assert out.startswith("TensorTorrent demo: a Llama-style decoder (2 layers, hidden 64")
    assert "1. In RAM on this CPU: compiled in" in out and "against eager PyTorch's" in out
    assert "2. On a declared device too small for the weights: vgpu" in out and "region(s) on vgpu" in out
    assert "3. From a checkpoint of" in out and "against the disk bound" in out
    assert out.count("largest difference from eager on the logits") == 4
    assert len(out.splitlines()) <= 16 and "VirtualDevice(" not in out and "CompileConfig(" not in out
