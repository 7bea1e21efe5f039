"""The `tensortorrent demo` command compiles a Llama-style decoder and reports parity and time."""

from __future__ import annotations

import pytest

from tensortorrent.cli.main import main

pytest.importorskip("transformers")


def test_demo_runs_small(capsys):
    assert main(["demo", "--layers", "2", "--hidden", "64", "--seq", "8", "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "r1:model.layers.0" in out
    assert "largest |compiled - eager| on the logits" in out
    assert "compiled/eager" in out
    assert "saved and loaded back (no model code):" in out and "region(s) on vgpu" in out
