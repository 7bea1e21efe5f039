"""Shared test helpers: parity checks against eager PyTorch and test-only custom ops."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import tensortorrent as tt
from tensortorrent import build
from tensortorrent.hardware import conv_kernels, matmul_kernels
from tensortorrent.runtime import packed_weights


def rss_growth(child_source: str, *args: object) -> int:
    """Runs `child_source` in a fresh interpreter (without our PYTHONPATH) with `args`; it
    prints its baseline and its peak RSS; returns how far the peak rose above the baseline."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", child_source, *map(str, args)], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    baseline, peak = (int(v) for v in result.stdout.split())
    return peak - baseline


def wait_until(done: Callable[[], object], timeout_s: float = 10.0, every_s: float = 0.01) -> object:
    """Polls `done` until it returns a true value or `timeout_s` passes, and returns its last
    value: for effects another thread finishes just after the call under test returns."""
    deadline = time.monotonic() + timeout_s
    while not (value := done()) and time.monotonic() < deadline:
        time.sleep(every_s)
    return value


def eager_outputs(model: torch.nn.Module, args: tuple, kwargs: dict | None = None):
    """The model's outputs in eval mode, without grad, leaving its mode as it was."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return model(*args, **(kwargs or {}))
    finally:
        model.train(was_training)


@pytest.fixture
def packed_always_faster(monkeypatch):
    """Every convolution and product timed faster on its packed weight, alone and in its
    region (the graph on packed weights, timed second, runs in half the time), and a
    one-region plan's kernel kept over the model's own forward (timed against it, a small
    model's packed region lost to noise on a CI machine and the test found nothing packed)."""
    for kernels in (conv_kernels, matmul_kernels):
        real = kernels.packed_timing

        def faster(kernel, real=real):
            timing = real(kernel)
            return dataclasses.replace(timing, unpacked_s=1.0, packed_s=0.5) if timing.packed_s is not None else timing

        monkeypatch.setattr(kernels, "packed_timing", faster)
    monkeypatch.setattr(packed_weights, "time_side_by_side", lambda captured, packed: (1.0, 0.5))
    monkeypatch.setattr(build, "unless_model_forward_is_faster", lambda backends, run_region, run_model: backends)


def assert_parity(model: torch.nn.Module, args: tuple, kwargs: dict | None = None, **compile_kwargs):
    """Compiles `model`, checks outputs against eager (default tolerances) and returns it."""
    compiled = tt.compile(model, example_inputs=args, example_kwargs=kwargs, **compile_kwargs)
    expected = eager_outputs(model, args, kwargs)
    got = compiled(*args, **(kwargs or {}))
    torch.testing.assert_close(got, expected)
    assert type(got) is type(expected)
    return compiled


class Hooks:
    """What the test ops do when they run inside a region; tests set these callbacks."""

    lock = threading.Lock()
    on_probe = None  # called with the probe's tag
    calls: list[int] = []


@torch.library.custom_op("tt_test::probe", mutates_args=())
def probe(x: torch.Tensor, tag: int) -> torch.Tensor:
    """Identity that records its tag and runs Hooks.on_probe: a window into a running call."""
    with Hooks.lock:
        Hooks.calls.append(tag)
    if Hooks.on_probe is not None:
        Hooks.on_probe(tag)
    return x.clone()


@probe.register_fake
def _(x, tag):
    return torch.empty_like(x)


class ProbeChain(torch.nn.Module):
    """linear -> probe(0) -> linear -> probe(1) -> ... : one region per op with max_region_nodes=1."""

    def __init__(self, stages: int = 4, width: int = 8) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(stages))

    def forward(self, x):
        for tag, layer in enumerate(self.layers):
            x = probe(layer(x), tag)
        return x


PLUGINS = Path(__file__).resolve().parent / "plugins"


@pytest.fixture
def plugins_from(monkeypatch):
    """Puts a folder of installed distributions (tests/plugins/NAME) on sys.path, as pip
    would, for one test: its backends are found through their entry points."""
    from tensortorrent.backends import registry

    def install(name: str) -> None:
        monkeypatch.syspath_prepend(str(PLUGINS / name))
        registry.reload_plugins()

    yield install
    registry.reload_plugins()


@pytest.fixture
def apart_device(plugins_from):
    plugins_from("apart")  # the "apart" backend: one device, apart:0, whose resident weights are copies
    return "apart:0"


@pytest.fixture
def hooks():
    Hooks.calls = []
    Hooks.on_probe = None
    yield Hooks
    Hooks.on_probe = None
    Hooks.calls = []


def sleep_then(seconds: float):
    def hook(tag):
        time.sleep(seconds)

    return hook
