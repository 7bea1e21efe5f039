"""integrity.json: the size and sha256 of every file, checked while the files are read."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import ArtifactError
from ..planning.plan import usable_cores
from ..storage.file_digests import CHUNK, digest_file
from .layout import INTEGRITY, MANIFEST, check_file_name


def write_integrity(directory: str, names: list[str]) -> None:
    """Records every file of the artifact (but integrity.json itself)."""
    files = {name: digest_file(os.path.join(directory, name)) for name in sorted(names)}
    _write_synced(os.path.join(directory, INTEGRITY), json.dumps({"files": files}, indent=2).encode())


def list_files(directory: str) -> list[str]:
    """The artifact's file names; ArtifactError where it has no manifest (not an
    artifact at all), or on a symlink or a subdirectory anywhere."""
    if os.path.islink(directory):
        raise ArtifactError(f"{directory}: the artifact directory is a symlink; refusing to follow it")
    if not os.path.lexists(os.path.join(directory, MANIFEST)):
        raise ArtifactError(f"{directory}: {MANIFEST} missing; not a TensorTorrent artifact")
    names = []
    with os.scandir(directory) as entries:
        for entry in entries:
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                raise ArtifactError(f"{entry.name}: is a symlink; an artifact holds only regular files")
            if not stat.S_ISREG(mode):
                raise ArtifactError(f"{entry.name}: is not a regular file; an artifact holds only regular files")
            names.append(entry.name)
    return sorted(names)


def read_integrity(directory: str, present: list[str]) -> dict[str, dict[str, Any]]:
    """integrity.json's records, checked against the files present: none missing, none extra."""
    if INTEGRITY not in present:
        raise ArtifactError(f"{INTEGRITY}: missing; cannot verify the artifact (load with verify_integrity=False)")
    try:
        with open(os.path.join(directory, INTEGRITY), "rb") as handle:
            files = json.loads(handle.read())["files"]
        records = {check_file_name(name, INTEGRITY): _record(name, files[name]) for name in files}
    except (ValueError, KeyError, TypeError) as error:
        raise ArtifactError(f"{INTEGRITY}: not a valid integrity record ({error})") from error
    listed, found = set(records), set(present) - {INTEGRITY}
    if found - listed:
        raise ArtifactError(f"{sorted(found - listed)[0]}: extra file, not in {INTEGRITY}")
    if listed - found:
        raise ArtifactError(f"{sorted(listed - found)[0]}: missing (listed in {INTEGRITY})")
    return records


def _record(name: str, record: Any) -> dict[str, Any]:
    valid = (
        isinstance(record, dict)
        and isinstance(record.get("size"), int)
        and isinstance(record.get("sha256"), str)
        and isinstance(record.get("chunk_size"), int)
        and record["chunk_size"] > 0
        and isinstance(record.get("chunks"), list)
    )
    if not valid:
        raise ValueError(f"record of {name!r} needs size, sha256, a positive chunk_size and chunks")
    return record


def read_file(directory: str, name: str, expected: dict[str, Any] | None) -> memoryview:
    """The whole file, read once into a 64-byte-aligned buffer (weights are used in place);
    with `expected`, its size and chunk digests are checked.

    Each chunk is hashed on a thread pool as soon as it has been read, while the next one
    is read (hashlib releases the GIL), so verifying costs little more than the read.
    """
    path = os.path.join(directory, name)
    try:
        with open(path, "rb", buffering=0) as handle, ThreadPoolExecutor(max_workers=usable_cores()) as pool:
            size = os.fstat(handle.fileno()).st_size
            if expected is not None and size != expected["size"]:
                raise ArtifactError(f"{name}: size {size} bytes, expected {expected['size']} (truncated or modified)")
            chunk = expected["chunk_size"] if expected is not None else CHUNK
            view = aligned_buffer(size)
            pending = []
            for start in range(0, size, chunk):
                piece = view[start : start + chunk]
                filled = 0
                while filled < len(piece):
                    count = handle.readinto(piece[filled:])
                    if not count:
                        raise ArtifactError(f"{name}: ended after {start + filled} of {size} bytes while being read")
                    filled += count
                if expected is not None:
                    pending.append(pool.submit(_sha256, piece))
            digests = [future.result() for future in pending]
    except OSError as error:
        raise ArtifactError(f"{name}: cannot be read ({error.strerror or error})") from error
    if expected is not None and digests != expected["chunks"]:
        raise ArtifactError(f"{name}: sha256 differs from {INTEGRITY} (the file was modified or corrupted)")
    return view


def aligned_buffer(size: int, alignment: int = 64) -> memoryview:
    """A writable buffer of `size` zero bytes whose first byte is `alignment`-aligned."""
    backing = bytearray(size + alignment)
    address = ctypes.addressof(ctypes.c_char.from_buffer(backing))
    start = -address % alignment
    return memoryview(backing)[start : start + size]


def _sha256(data: memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_synced(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
