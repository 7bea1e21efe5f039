"""Sweeps injected I/O faults over one operation, in a process run under the fault shim
(cpp/fault/fault_shim.c as LD_PRELOAD, TT_FAULT_DIR set), for tests/e2e/test_fault_sweep.py.

python fault_worker.py OPERATION DIR [EVERY]   fails the 1st, 2nd, ... file operation under
                                               DIR of one OPERATION, each in turn (or the
                                               1st, 1+EVERY-th, ...: a shorter pass):
  save        a save over an older artifact in DIR
  cache       a compile under a RAM budget, writing the weights cache in DIR, and a call
  streamed    a call streaming weights from the weights cache in DIR
  checkpoint  a compile and a call of a meta model whose checkpoint lies in DIR
  spill       a call spilling activations to DIR

For each fault it checks what a user may rely on: a typed error (a TensorTorrentError) or
a right answer, no file descriptor, thread or data-plane byte left held, and that the next
try, without faults, succeeds and leaves no staging file in DIR. Prints one JSON summary line.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys

import torch
from safetensors.torch import save_file
from torch import nn

import tensortorrent as tt
from tensortorrent.storage.weights_cache import cache_directory, clear_cache


def mlp(seed: int, width: int = 64, layers: int = 2) -> nn.Module:
    torch.manual_seed(seed)
    stack = [module for _ in range(layers) for module in (nn.Linear(width, width), nn.ReLU())]
    return nn.Sequential(*stack, nn.Linear(width, 8)).eval()


def weight_bytes(model: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def close_to(got: torch.Tensor, want: torch.Tensor) -> bool:
    return torch.allclose(got, want, rtol=1e-4, atol=1e-5)


def staging_files(directory: str) -> list[str]:
    """What a write in progress names `.NAME.saving-PID-*` (see tensortorrent.files)."""
    return sorted(
        os.path.relpath(os.path.join(folder, name), directory)
        for folder, subfolders, files in os.walk(directory)
        for name in files + subfolders
        if ".saving-" in name or ".old-" in name
    )


def held_bytes(compiled) -> list[int] | None:
    """Bytes the compiled module's data plane holds per memory tier, or None without one."""
    plane = getattr(getattr(compiled, "_plane", None), "plane", None)
    if plane is None:
        return None
    return [plane.held(tier) for tier in range(len(compiled._plane.plan.program.memory_plan.resident_bytes))]


class Save:
    """A save of a new artifact over an old one: the old or the new one is there whole after."""

    def __init__(self, directory: str) -> None:
        self.x = torch.randn(2, 64)
        self.old, self.new = (tt.compile(mlp(seed), (self.x,), devices="cpu") for seed in (1, 2))
        self.target = os.path.join(directory, "artifact")
        self.old.save(self.target)

    def attempt(self) -> None:
        self.new.save(self.target)

    def check(self) -> list[str]:
        got = tt.load_compiled(self.target)(self.x)  # the old artifact or the new one, whole
        if not any(close_to(got, module(self.x)) for module in (self.old, self.new)):
            differences = [float((got - module(self.x)).abs().max()) for module in (self.old, self.new)]
            return [f"mixed: differs from old and new by {differences}"]
        self.new.save(self.target)  # the next save succeeds, and removes what a failed one could not
        problems = (
            [] if close_to(tt.load_compiled(self.target)(self.x), self.new(self.x)) else ["the next save is wrong"]
        )
        left = sorted(set(os.listdir(os.path.dirname(self.target))) - {"artifact"})
        self.old.save(self.target)  # back to the old one for the next fault
        return problems + [f"left {left}"] * bool(left)

    def held(self) -> list[int] | None:
        return None


class Computation:
    """An operation that gives an answer (run()), right when it is `expected`."""

    expected: torch.Tensor
    compiled = None  # the module whose data plane is counted, where the operation keeps one

    def run(self) -> torch.Tensor:
        raise NotImplementedError

    def attempt(self) -> None:
        if not close_to(self.run(), self.expected):
            raise AssertionError("an operation that returned gives a wrong answer")

    def check(self) -> list[str]:
        return [] if close_to(self.run(), self.expected) else ["the next try gives a wrong answer"]

    def held(self) -> list[int] | None:
        return held_bytes(self.compiled)


class CacheWrite(Computation):
    """A compile under a RAM budget: the weights cache is written, then streamed from."""

    def __init__(self, directory: str) -> None:
        self.model, self.x = mlp(3, width=128, layers=8), torch.randn(4, 128)
        self.expected = self.model(self.x)
        self.config = tt.CompileConfig(ram_budget_bytes=weight_bytes(self.model) // 3, spill_dir=directory)
        self.cache = cache_directory(directory)

    def run(self) -> torch.Tensor:
        return tt.compile(self.model, (self.x,), config=self.config)(self.x)

    def attempt(self) -> None:
        clear_cache(self.cache)  # so that every try writes it
        super().attempt()


class StreamedCall(Computation):
    """A call of a module whose weights stream from the weights cache."""

    def __init__(self, directory: str) -> None:
        model, self.x = mlp(4, width=128, layers=8), torch.randn(4, 128)
        self.expected = model(self.x)
        config = tt.CompileConfig(ram_budget_bytes=weight_bytes(model) // 3, spill_dir=directory)
        self.compiled = tt.compile(model, (self.x,), config=config)

    def run(self) -> torch.Tensor:
        return self.compiled(self.x)


class CheckpointCompile(Computation):
    """A compile of a meta model from a safetensors checkpoint read in place, and a call."""

    def __init__(self, directory: str) -> None:
        model, self.x = mlp(5, width=128, layers=8), torch.randn(4, 128)
        self.expected = model(self.x)
        self.checkpoint = os.path.join(directory, "model.safetensors")
        save_file(model.state_dict(), self.checkpoint)
        with torch.device("meta"):
            self.meta = mlp(5, width=128, layers=8)
        self.config = tt.CompileConfig(ram_budget_bytes=weight_bytes(model) // 3, spill_dir=directory)

    def run(self) -> torch.Tensor:
        return tt.compile(self.meta, (self.x,), checkpoint=self.checkpoint, config=self.config)(self.x)


class SpillingCall(Computation):
    """A call whose activations beyond its budget spill to files in the folder."""

    def __init__(self, directory: str) -> None:
        torch.manual_seed(6)
        model = SkipChain(nn.Sequential(*(nn.Linear(256, 256) for _ in range(6))).eval())
        self.x = torch.randn(64, 256)
        activation = 64 * 256 * 4
        # One op per region, three activations in RAM: the largest region's working set,
        # so the two kept for the end take turns on disk.
        config = tt.CompileConfig(max_region_nodes=1, activation_budget_bytes=3 * activation, spill_dir=directory)
        self.compiled = tt.compile(model, (self.x,), config=config)
        self.expected = model(self.x)

    def run(self) -> torch.Tensor:
        return self.compiled(self.x)


class SkipChain(nn.Module):
    """The layers in a chain, the first two outputs added back at the end: both stay live
    across every region between, so a small activation budget spills them."""

    def __init__(self, layers: nn.Sequential) -> None:
        super().__init__()
        self.layers = layers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = self.layers[0](x)
        second = self.layers[1](first)
        h = second
        for layer in self.layers[2:]:
            h = layer(h)
        return h + first + second


OPERATIONS = {
    "save": Save,
    "cache": CacheWrite,
    "streamed": StreamedCall,
    "checkpoint": CheckpointCompile,
    "spill": SpillingCall,
}


def open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def threads() -> int:
    """Every thread of the process: Python's and the core's native ones."""
    return len(os.listdir("/proc/self/task"))


def sweep(operation, directory: str, shim: ctypes.CDLL, every: int = 1) -> dict:
    shim.tt_fault_arm(0)
    operation.attempt()  # warm: imports, caches and files of a first run are not leaks
    shim.tt_fault_arm(0)
    operation.attempt()  # how many file operations one makes
    calls = shim.tt_fault_count()
    summary = {
        "calls": calls,
        "faults": 0,
        "typed": 0,
        "passed": 0,
        "untyped": [],
        "leaks": [],
        "left": [],
        "wrong": [],
    }
    for fault in range(1, calls + 1, every):
        gc.collect()
        descriptors, running, held = open_descriptors(), threads(), operation.held()
        shim.tt_fault_arm(fault)
        try:
            operation.attempt()
            summary["passed"] += 1  # the fault fell on a retried read, or past what could fail
        except tt.TensorTorrentError:
            summary["typed"] += 1
        except Exception as error:  # noqa: BLE001 - what the sweep exists to find
            summary["untyped"].append(f"{fault}: {type(error).__name__}: {error}")
        summary["faults"] += 1
        shim.tt_fault_arm(0)
        gc.collect()
        leaked = sorted(open_descriptors() - descriptors)
        if leaked or threads() > running or operation.held() != held:
            summary["leaks"].append(
                f"{fault}: descriptors {leaked}, threads {running} -> {threads()}, held {held} -> {operation.held()}"
            )
        summary["wrong"] += [f"{fault}: {problem}" for problem in operation.check()]
        if left := staging_files(directory):  # what a failed removal left, the next try removes
            summary["left"].append(f"{fault}: {left}")
    return summary


if __name__ == "__main__":
    name, folder, every = sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1
    library = ctypes.CDLL(os.environ["LD_PRELOAD"])
    library.tt_fault_count.restype = ctypes.c_long
    library.tt_fault_arm.argtypes = [ctypes.c_long]
    with torch.no_grad():
        print(json.dumps(sweep(OPERATIONS[name](folder), folder, library, every)))
