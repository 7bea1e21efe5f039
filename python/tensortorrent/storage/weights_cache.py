"""The weights cache: a compiled model's weights written once as safetensors, keyed by their digest.

When tt.compile is given a RAM budget its model's weights exceed, the weights are written
to `<spill_dir>/weights-<digest>.safetensors` (with a `.json` sidecar of chunk digests)
and streamed from there, like a loaded artifact's. A later compile of the same weights
reuses the file. Files are published atomically (temporary name, fsync, rename), bounded
by the disk budget, and removed by `tensortorrent cache clear`.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import MemoryCapacityError, StorageIOError, TensorTorrentError
from ..files import leftover_prefix, remove_leftovers, write_text_atomically, writing
from ..hardware.budgets import spill_root
from ..units import format_bytes
from .file_digests import digest_file
from .safetensors_file import tensor_crc32c, write_safetensors

if TYPE_CHECKING:  # a type read here; capture builds on storage
    from ..capture.program import BoundTensor

PREFIX, SUFFIX, SIDECAR = "weights-", ".safetensors", ".json"


@dataclass(frozen=True)
class CachedWeights:
    path: str
    record: dict  # {"size", "chunk_size", "chunks", ...} as integrity.json records a file
    reused: bool  # an earlier compile had written it


def weights_digest(bound: list[BoundTensor]) -> str:
    """sha256 over every bound tensor's name, dtype, shape and bytes, in slot order."""
    digest = hashlib.sha256()
    for tensor in bound:
        value = tensor.tensor.detach().contiguous()
        digest.update(json.dumps([tensor.names[0], str(value.dtype), list(value.shape)]).encode())
        nbytes = value.numel() * value.element_size()
        if nbytes:
            digest.update((ctypes.c_char * nbytes).from_address(value.data_ptr()))
    return digest.hexdigest()


def cache_weights(bound: list[BoundTensor], directory: str, disk_budget: int) -> CachedWeights:
    """The cache file holding `bound`, written now unless it exists; MemoryCapacityError
    when writing it would exceed `disk_budget` bytes, StorageIOError when the disk fails
    (nothing is left behind then). Either way, what killed writes left in `directory` goes."""
    path = os.path.join(directory, PREFIX + weights_digest(bound)[:32] + SUFFIX)
    try:
        os.makedirs(directory, exist_ok=True)
        cached = _cached(path) or _write(bound, path, disk_budget)
    except OSError as error:
        if isinstance(error, TensorTorrentError):
            raise
        where = f" ({error.filename})" if error.filename else ""
        raise StorageIOError(
            f"the weights cache could not write {path}: {error.strerror or error}{where}; nothing was cached"
        ) from error
    remove_leftovers(directory)
    return cached


def _cached(path: str) -> CachedWeights | None:
    """The file an earlier compile wrote, if it is there whole (its sidecar, written
    first, records its size)."""
    if not (os.path.exists(path) and os.path.exists(path + SIDECAR)):
        return None
    with open(path + SIDECAR, encoding="utf-8") as handle:
        record = json.load(handle)
    return CachedWeights(path, record, reused=True) if record.get("size") == os.path.getsize(path) else None


def _write(bound: list[BoundTensor], path: str, disk_budget: int) -> CachedWeights:
    needed = sum(t.tensor.numel() * t.tensor.element_size() for t in bound)
    if needed > disk_budget:
        raise MemoryCapacityError(
            f"the weights cache needs {needed} bytes ({format_bytes(needed)}) on disk under {os.path.dirname(path)}, "
            f"but the disk budget allows {disk_budget} bytes ({format_bytes(disk_budget)})"
        )
    fd, staging = tempfile.mkstemp(prefix=leftover_prefix(path), suffix=".tmp", dir=os.path.dirname(path))
    os.close(fd)
    with writing(staging):
        try:
            tensors = {t.names[0]: t.tensor.detach().contiguous() for t in bound}
            write_safetensors(tensors, staging)
            record = digest_file(staging)
            record["tensor_crc32c"] = {name: tensor_crc32c(tensor) for name, tensor in tensors.items()}
            with open(staging, "rb+") as handle:
                os.fsync(handle.fileno())
            write_text_atomically(path + SIDECAR, json.dumps(record))
            os.replace(staging, path)
        except BaseException:
            # An error or a cancellation leaves no half-written file, nor a sidecar of none.
            for leftover in [staging] if os.path.exists(path) else [staging, path + SIDECAR]:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(leftover)
            raise
    return CachedWeights(path, record, reused=False)


def cache_directory(spill_dir: str | None) -> str:
    """Where compiles with this CompileConfig.spill_dir keep cached weights."""
    return os.path.join(spill_root(spill_dir), "weights")


def cached_files(directory: str) -> list[str]:
    """The cache's files (weights and sidecars) under `directory`, sorted."""
    if not os.path.isdir(directory):
        return []
    return sorted(
        os.path.join(directory, name)
        for name in os.listdir(directory)
        if name.startswith(PREFIX) or (name.startswith("." + PREFIX) and name.endswith(".tmp"))
    )


def clear_cache(directory: str) -> tuple[int, int]:
    """Removes every cache file under `directory`; returns (files, bytes) removed."""
    files = cached_files(directory)
    freed = 0
    for path in files:
        freed += os.path.getsize(path)
        os.remove(path)
    return len(files), freed
