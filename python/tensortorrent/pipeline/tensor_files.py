"""The pipeline's input, output and gradient files: safetensors, through the artifact's own
reader and writer (no dependency beyond the package's)."""

from __future__ import annotations

import os

import torch

from ..storage.safetensors_file import tensors_from_safetensors, write_safetensors


def save_tensors(tensors: dict[str, torch.Tensor], path: str | os.PathLike) -> None:
    """Writes `tensors` as a safetensors file, whole or not at all (a partial file, then a rename)."""
    path = os.fspath(path)
    partial = f"{path}.partial-{os.getpid()}"
    try:
        write_safetensors({key: value.detach().contiguous() for key, value in tensors.items()}, partial)
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def load_tensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file (FileNotFoundError when there is none)."""
    with open(path, "rb") as file:
        data = bytearray(file.read())
    return tensors_from_safetensors(memoryview(data), os.fspath(path))
