"""A checkpoint located on disk: for each tensor, its file, byte range, dtype and shape.

Only headers are read, by the core's validating safetensors reader; the tensors' bytes stay
where they are, for the I/O engine to stream. A checkpoint is one `.safetensors` file, a
list of them, a Hugging Face `*.safetensors.index.json` with its shards, or a folder
holding one of those.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from .. import core
from ..errors import CheckpointError, InvalidArgumentError, NotFoundError, StorageError
from .safetensors_file import SAFETENSORS_DTYPES

SAFETENSORS_SUFFIX = ".safetensors"
INDEX_SUFFIX = ".safetensors.index.json"
# What a folder is searched for first: the names Hugging Face writes.
PREFERRED_IN_DIRECTORY = ("model.safetensors.index.json", "model.safetensors")
LISTED_NAMES = 10  # names an error message shows before "and N more"

ACCEPTED = (
    "a path (str or os.PathLike) to a .safetensors file, a *.safetensors.index.json or a folder "
    "holding one, or a list of .safetensors paths"
)


@dataclass(frozen=True)
class CheckpointTensor:
    """Where one tensor's bytes lie: `nbytes` bytes from absolute byte `offset` of file `path`."""

    name: str
    path: str  # absolute
    offset: int
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint's files (absolute paths, sorted) and its tensors by name."""

    files: tuple[str, ...]
    tensors: dict[str, CheckpointTensor]

    def file_sizes(self) -> dict[str, int]:
        """Each file's size in bytes now (one stat per file)."""
        return {path: os.path.getsize(path) for path in self.files}

    def without(self, names: Iterable[str]) -> Checkpoint:
        """The same checkpoint without the tensors `names` (taken for something else)."""
        taken = set(names)
        return Checkpoint(self.files, {n: t for n, t in self.tensors.items() if n not in taken})


def read_tensor(tensor: CheckpointTensor) -> torch.Tensor:
    """One tensor's values, read into memory: for small ones (a program's constants)."""
    with open(tensor.path, "rb") as handle:
        handle.seek(tensor.offset)
        data = bytearray(handle.read(tensor.nbytes))
    if len(data) != tensor.nbytes:
        raise CheckpointError(
            f"{tensor.path}: {tensor.name!r} is truncated: {len(data)} of its {tensor.nbytes} bytes are in the file"
        )
    if not data:
        return torch.empty(tensor.shape, dtype=tensor.dtype)
    return torch.frombuffer(data, dtype=tensor.dtype).reshape(tensor.shape)


def open_checkpoint(checkpoint: str | os.PathLike | list | tuple) -> Checkpoint:
    """The tensors of `checkpoint` (see the module's docstring for what it may be), from their
    files' headers; raises CheckpointError naming the file or tensor when something is wrong,
    InvalidArgumentError when `checkpoint` is not a path or a list of paths."""
    if isinstance(checkpoint, (list, tuple)):
        if not checkpoint:
            raise CheckpointError(f"checkpoint: expected {ACCEPTED}; got an empty {type(checkpoint).__name__}")
        return checkpoint_of_files([as_path(item, f"checkpoint[{index}]") for index, item in enumerate(checkpoint)])
    path = as_path(checkpoint, "checkpoint")
    if os.path.isdir(path):
        path = find_in_directory(path)
    elif not os.path.exists(path):
        raise CheckpointError(f"checkpoint {path}: no such file or folder")
    if path.endswith(".json"):
        return checkpoint_of_index(path)
    return checkpoint_of_files([path])


def as_path(value: Any, what: str) -> str:
    """`value` as an absolute path; InvalidArgumentError when it is not a str or os.PathLike."""
    path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(path, str):
        raise InvalidArgumentError(f"{what}: expected {ACCEPTED}; got {type(value).__name__} {value!r}")
    return os.path.abspath(path)


def find_in_directory(directory: str) -> str:
    """The checkpoint file in `directory`: Hugging Face's names first, else its only index, else
    its only safetensors file."""
    for name in PREFERRED_IN_DIRECTORY:
        if os.path.isfile(os.path.join(directory, name)):
            return os.path.join(directory, name)
    names = sorted(os.listdir(directory))
    for suffix in (INDEX_SUFFIX, SAFETENSORS_SUFFIX):
        candidates = [name for name in names if name.endswith(suffix)]
        if len(candidates) == 1:
            return os.path.join(directory, candidates[0])
        if candidates:
            raise CheckpointError(
                f"checkpoint folder {directory} holds {len(candidates)} *{suffix} files and no "
                f"{' or '.join(PREFERRED_IN_DIRECTORY)}: {list_names(candidates)}; pass one file, or a list of files"
            )
    raise CheckpointError(f"checkpoint folder {directory} holds no *{INDEX_SUFFIX} and no *{SAFETENSORS_SUFFIX} file")


def checkpoint_of_files(paths: list[str]) -> Checkpoint:
    """The tensors of these safetensors files; a name may appear in one file only."""
    files = sorted(paths)
    for first, second in zip(files, files[1:]):
        if first == second:
            raise CheckpointError(f"checkpoint: file {first} is given twice")
    tensors: dict[str, CheckpointTensor] = {}
    for path in files:
        for tensor in tensors_of_file(path):
            if tensor.name in tensors:
                raise CheckpointError(
                    f"checkpoint: tensor {tensor.name!r} is in two files: {tensors[tensor.name].path} and {path}"
                )
            tensors[tensor.name] = tensor
    return Checkpoint(files=tuple(files), tensors=tensors)


def tensors_of_file(path: str) -> list[CheckpointTensor]:
    """The tensors in one safetensors file, by offset, from its (validated) header."""
    if not os.path.isfile(path):
        problem = "is a folder, not a .safetensors file" if os.path.isdir(path) else "does not exist"
        raise CheckpointError(f"checkpoint file {path} {problem}")
    try:
        header = core.read_safetensors_header(path)
    except (StorageError, NotFoundError) as error:
        raise CheckpointError(f"checkpoint file {path} is not a readable safetensors file: {error}") from error
    tensors = []
    for entry in header.tensors:
        if entry.dtype not in SAFETENSORS_DTYPES:
            raise CheckpointError(
                f"checkpoint file {path}: tensor {entry.name!r} has dtype {entry.dtype}; "
                f"supported are {', '.join(SAFETENSORS_DTYPES)}"
            )
        tensors.append(
            CheckpointTensor(
                name=entry.name,
                path=path,
                offset=header.data_offset + entry.begin,
                nbytes=entry.end - entry.begin,
                dtype=SAFETENSORS_DTYPES[entry.dtype],
                shape=tuple(entry.shape),
            )
        )
    return tensors


def checkpoint_of_index(index_path: str) -> Checkpoint:
    """The tensors of an index's shards, checked against its weight_map both ways."""
    weight_map = read_weight_map(index_path)
    folder = os.path.dirname(index_path)
    shard_of = {name: os.path.normpath(os.path.join(folder, shard)) for name, shard in weight_map.items()}
    # An index is read from where it lies: a shard beside it or below, never elsewhere.
    outside = sorted({weight_map[name] for name, shard in shard_of.items() if not _within(shard, folder)})
    if outside:
        raise CheckpointError(
            f"checkpoint index {index_path} names shard file(s) outside its folder {folder}: {list_names(outside)}; "
            "expected paths relative to that folder, within it"
        )
    absent = sorted({shard for shard in shard_of.values() if not os.path.isfile(shard)})
    if absent:
        raise CheckpointError(
            f"checkpoint index {index_path} names {len(absent)} shard file(s) that do not exist: {list_names(absent)}"
        )
    checkpoint = checkpoint_of_files(sorted(set(shard_of.values())))
    misplaced = [
        f"{name!r} in {weight_map[name]}"
        for name, shard in shard_of.items()
        if name not in checkpoint.tensors or checkpoint.tensors[name].path != shard
    ]
    if misplaced:
        raise CheckpointError(
            f"checkpoint index {index_path} places {len(misplaced)} tensor(s) in shards that do not hold them: "
            f"{list_names(misplaced, quote=False)}"
        )
    unlisted = [name for name in checkpoint.tensors if name not in shard_of]
    if unlisted:
        raise CheckpointError(
            f"checkpoint index {index_path}: its shards hold {len(unlisted)} tensor(s) that its weight_map "
            f"does not list: {list_names(unlisted)}"
        )
    return checkpoint


def _within(path: str, folder: str) -> bool:
    return os.path.commonpath([os.path.abspath(path), os.path.abspath(folder)]) == os.path.abspath(folder)


def read_weight_map(index_path: str) -> dict[str, str]:
    """The index's weight_map: tensor name -> shard file, relative to the index's folder."""
    try:
        with open(index_path, encoding="utf-8") as file:
            index = json.load(file)
    except (OSError, ValueError) as error:  # ValueError covers bad JSON and bad UTF-8
        raise CheckpointError(f"checkpoint index {index_path} is not a readable JSON file: {error}") from error
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(shard, str) for shard in weight_map.values()):
        raise CheckpointError(
            f'checkpoint index {index_path}: expected a JSON object with a "weight_map" object mapping tensor '
            f"names to shard files; got {json.dumps(index)[:200]}"
        )
    return weight_map


def list_names(names: Iterable[str], quote: bool = True, separator: str = ", ") -> str:
    """The first LISTED_NAMES names, then "and N more" for the rest."""
    names = list(names)
    shown = separator.join(repr(name) if quote else name for name in names[:LISTED_NAMES])
    rest = len(names) - LISTED_NAMES
    return f"{shown} and {rest} more" if rest > 0 else shown
