"""Runs artifact work in a separate process for tests/e2e/test_artifact_processes.py.

python artifact_worker.py save PATH SEED [REPEAT]   compile model(SEED), save REPEAT times
python artifact_worker.py check PATH EXPECTED       load PATH, compare with EXPECTED outputs
"""

from __future__ import annotations

import sys

import torch
from safetensors.torch import load_file, save_file
from torch import nn

import tensortorrent as tt

INPUT_SEED = 1234


def model(seed: int) -> nn.Module:
    """A model whose weights (about 16 MiB) depend on `seed`, so versions are distinguishable."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 1024)).eval()


def example() -> torch.Tensor:
    return torch.randn(4, 1024, generator=torch.Generator().manual_seed(INPUT_SEED))


def expected_outputs(seed: int, path: str) -> None:
    """Writes model(seed)'s eager output to `path` (safetensors)."""
    with torch.no_grad():
        save_file({"out": model(seed)(example())}, path)


def save(path: str, seed: int, repeat: int) -> None:
    compiled = tt.compile(model(seed), example_inputs=(example(),))
    for _ in range(repeat):
        compiled.save(path)
    print("saved", flush=True)


def check(path: str, *expected_paths: str) -> None:
    """Exits 0 if the artifact at `path` loads and matches one of the expected outputs."""
    out = tt.load_compiled(path)(example())
    for expected in expected_paths:
        # Within float tolerances: the loading process picks its own kernels (oneDNN or aten).
        if torch.allclose(out, load_file(expected)["out"], atol=1e-5, rtol=1e-4):
            print("match", expected, flush=True)
            return
    sys.exit("the loaded artifact matches none of the expected outputs")


if __name__ == "__main__":
    command, path, *rest = sys.argv[1:]
    if command == "save":
        save(path, int(rest[0]), int(rest[1]) if len(rest) > 1 else 1)
    elif command == "check":
        check(path, *rest)
    else:
        sys.exit(f"unknown command {command!r}")
