"""Compile progress is silent off a terminal and with TT_PROGRESS=0, and logs its stages."""

from __future__ import annotations

import logging
import time

import torch

import tensortorrent as tt
from tensortorrent.observe.progress import CompileProgress, progress_enabled


def test_disabled_off_a_terminal_and_by_env(monkeypatch):
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    monkeypatch.setenv("TT_PROGRESS", "0")
    assert not progress_enabled()
    monkeypatch.delenv("TT_PROGRESS")
    assert progress_enabled()


def test_display_appears_only_for_slow_compiles(monkeypatch):
    monkeypatch.setattr("tensortorrent.observe.progress.SHOW_AFTER_S", 0.0)
    progress = CompileProgress(["a", "b"], enabled=True)
    with progress:
        with progress.stage("a"):
            time.sleep(0.2)
            assert progress._progress is not None
    assert progress._progress is None


def test_stages_are_logged(caplog):
    with caplog.at_level(logging.DEBUG, logger="tensortorrent"):
        tt.compile(torch.nn.Linear(2, 2), example_inputs=(torch.randn(1, 2),))
    messages = [r.getMessage() for r in caplog.records]
    stages = [m.removeprefix("compile stage ").split(" took ")[0] for m in messages if m.startswith("compile stage")]
    assert stages == ["export", "partition", "compile regions", "profile", "plan", "build"]


def test_compile_prints_nothing_off_a_terminal(capsys):
    tt.compile(torch.nn.Linear(2, 2), example_inputs=(torch.randn(1, 2),))
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
