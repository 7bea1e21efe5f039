"""Sweeps injected I/O faults over one operation, in a process run under the fault shim
(cpp/fault/fault_shim.c as LD_PRELOAD, TT_FAULT_DIR set), for tests/e2e/test_fault_sweep.py.

python fault_worker.py save DIR ERRNO   saves a small module over an older artifact in DIR,
                                        failing the 1st, 2nd, ... file operation under DIR

For each fault it checks what a user may rely on: a typed error (a TensorTorrentError),
no file descriptor or thread left open, the old artifact or the new one there whole, and
that the next save succeeds and leaves nothing else in DIR. Prints one JSON summary line.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

import torch
from torch import nn

import tensortorrent as tt


def model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)).eval()


def open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def threads() -> int:
    """Every thread of the process: Python's and the core's native ones."""
    return len(os.listdir("/proc/self/task"))


def sweep_save(directory: str, shim: ctypes.CDLL) -> dict:
    x = torch.randn(2, 64)
    old, new = (tt.compile(model(seed), (x,), devices="cpu") for seed in (1, 2))
    target = os.path.join(directory, "artifact")
    shim.tt_fault_arm(0)
    old.save(target)
    shim.tt_fault_arm(0)
    new.save(target)  # how many operations a save over an artifact makes
    calls = shim.tt_fault_count()
    tt.load_compiled(target)  # warm: imports and caches, not leaks
    old.save(target)
    summary = {"calls": calls, "faults": 0, "typed": 0, "untyped": [], "leaks": [], "left": [], "mixed": []}
    for fault in range(1, calls + 1):
        descriptors, running = open_descriptors(), threads()
        shim.tt_fault_arm(fault)
        try:
            new.save(target)
        except tt.TensorTorrentError:
            summary["typed"] += 1
        except Exception as error:  # noqa: BLE001 - what the sweep exists to find
            summary["untyped"].append(f"{fault}: {type(error).__name__}: {error}")
        summary["faults"] += 1
        shim.tt_fault_arm(0)
        if open_descriptors() - descriptors or threads() > running:
            summary["leaks"].append(
                f"{fault}: descriptors {sorted(open_descriptors() - descriptors)}, threads {threads()}"
            )
        got = tt.load_compiled(target)(x)  # the old artifact or the new one, whole
        if not any(torch.allclose(got, module(x), rtol=1e-4, atol=1e-5) for module in (old, new)):
            diffs = [float((got - module(x)).abs().max()) for module in (old, new)]
            summary["mixed"].append(f"{fault}: differs from old and new by {diffs}")
        new.save(target)  # the next save succeeds, and removes what a failed one could not
        torch.testing.assert_close(tt.load_compiled(target)(x), new(x))
        left = sorted(set(os.listdir(directory)) - {"artifact"})
        if left:
            summary["left"].append(f"{fault}: {left}")
        old.save(target)  # back to the old one for the next fault
    return summary


if __name__ == "__main__":
    operation, directory = sys.argv[1], sys.argv[2]
    shim = ctypes.CDLL(os.environ["LD_PRELOAD"])
    shim.tt_fault_count.restype = ctypes.c_long
    shim.tt_fault_arm.argtypes = [ctypes.c_long]
    print(json.dumps({"save": sweep_save}[operation](directory, shim)))
