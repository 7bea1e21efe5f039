"""Freed heap memory is kept for the next call (runtime/heap_retention.py)."""

import os
import platform
import subprocess
import sys

import pytest
import torch
from torch import nn

import tensortorrent as tt
from tensortorrent import _core

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="heap retention sets glibc's malloc only")


def test_a_compiled_module_keeps_twice_what_its_calls_make():
    """Its 24 MiB output, like a language model's logits, comes back from the heap on the
    next call (that the heap then faults nothing in is the core's test: its executor's
    threads make this process's faults vary)."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 96 * 1024)).eval(), torch.randn(64, 32)
    compiled = tt.compile(model, example_inputs=(x,), config=tt.CompileConfig(max_region_nodes=2))
    assert compiled.region_count > 1
    retention = _core.heap_retention()
    if platform.libc_ver()[0] == "glibc":
        assert retention.supported and retention.mmap_threshold == 32 << 20
        assert retention.trim_bytes >= 2 * 64 * 96 * 1024 * 4
    else:
        assert not retention.supported
    torch.testing.assert_close(compiled(x), model(x))


def test_retention_only_rises_and_refuses_negative_bytes():
    with pytest.raises(tt.TensorTorrentError, match="bytes must be >= 0, got -1"):
        _core.retain_freed_heap(-1)
    before = _core.heap_retention().trim_bytes
    assert _core.retain_freed_heap(0).trim_bytes >= before


def retention_after_a_compile(**environment: str) -> bool:
    """Whether a fresh process with `environment` set holds the retention after compiling."""
    code = (
        "import torch, tensortorrent as tt; from tensortorrent import _core\n"
        "tt.compile(torch.nn.Linear(4, 4).eval(), example_inputs=(torch.randn(2, 4),))\n"
        "print(_core.heap_retention().supported)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "TT_HEAP_RETENTION"} | environment
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1] == "True"


@glibc_only
def test_tt_heap_retention_0_leaves_the_thresholds_alone():
    assert not retention_after_a_compile(TT_HEAP_RETENTION="0")


@glibc_only
@pytest.mark.parametrize(
    "setting", [("MALLOC_TRIM_THRESHOLD_", "1000000000"), ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1000000000")]
)
def test_thresholds_the_process_set_itself_are_left_alone(setting):
    assert not retention_after_a_compile(**dict([setting]))
