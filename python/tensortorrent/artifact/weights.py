"""Weights as safetensors: written with the safetensors library, read back without copies."""

from __future__ import annotations

import json
import struct
from typing import Any

import torch
from safetensors.torch import save_file

from ..capture.program import BoundTensor
from ..errors import ArtifactError

_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


def save_weights(bound: list[BoundTensor], path: str) -> list[dict[str, Any]]:
    """Writes each bound tensor once (tied names share it); returns the manifest's entries."""
    tensors: dict[str, torch.Tensor] = {}
    storages: set[int] = set()
    entries = []
    for tensor in bound:
        value = tensor.tensor.detach().contiguous()
        storage = value.untyped_storage().data_ptr()
        # safetensors refuses tensors that share memory; a view of another bound tensor is copied.
        tensors[tensor.names[0]] = value.clone() if storage in storages else value
        storages.add(storage)
        entries.append(
            {
                "key": tensor.names[0],
                "names": list(tensor.names),
                "kind": tensor.kind,
                "requires_grad": bool(tensor.tensor.requires_grad),
            }
        )
    save_file(tensors, path)
    return entries


def tensors_from_safetensors(data: bytearray, name: str) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file held in `data`, as views of it where aligned.

    Every offset and size is checked against the header, so a damaged file raises
    ArtifactError naming `name` instead of reading out of bounds.
    """
    if len(data) < 8:
        raise ArtifactError(f"{name}: {len(data)} bytes is too short for a safetensors file")
    (header_size,) = struct.unpack_from("<Q", data, 0)
    if header_size > len(data) - 8:
        raise ArtifactError(f"{name}: header of {header_size} bytes does not fit in a {len(data)}-byte file")
    try:
        header = json.loads(bytes(data[8 : 8 + header_size]))
    except ValueError as error:
        raise ArtifactError(f"{name}: header is not valid JSON ({error})") from error
    if not isinstance(header, dict):
        raise ArtifactError(f"{name}: header is not a JSON object")
    start = 8 + header_size
    tensors = {}
    for key, info in header.items():
        if key != "__metadata__":
            tensors[key] = _tensor(data, start, key, info, name)
    return tensors


def _tensor(data: bytearray, start: int, key: str, info: Any, name: str) -> torch.Tensor:
    try:
        dtype = _DTYPES[info["dtype"]]
        shape = [int(d) for d in info["shape"]]
        begin, end = (int(o) for o in info["data_offsets"])
    except (KeyError, TypeError, ValueError) as error:
        raise ArtifactError(f"{name}: tensor {key!r} has a malformed header entry ({error!r})") from error
    numel = 1
    for dim in shape:
        numel *= dim
    nbytes = numel * dtype.itemsize
    if min(shape, default=0) < 0 or begin < 0 or end - begin != nbytes or start + end > len(data):
        raise ArtifactError(f"{name}: tensor {key!r} lies outside the file or has the wrong size")
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    raw = torch.frombuffer(data, dtype=torch.uint8, count=nbytes, offset=start + begin)
    # A view needs its start aligned to the element size; otherwise copy this one tensor.
    return (raw if (start + begin) % dtype.itemsize == 0 else raw.clone()).view(dtype).reshape(shape)
