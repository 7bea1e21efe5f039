"""The sha256 of a file, whole and per chunk, read a piece at a time: what an artifact's
integrity.json records and what the weights cache records of the file it writes."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

CHUNK = 16 << 20  # bytes per digest: large enough for full disk speed
PIECE = 1 << 20  # bytes read at a time when hashing a file in pieces


def digest_file(path: str) -> dict[str, Any]:
    """{"size", "sha256", "chunk_size", "chunks"}: the whole file's digest, and one per chunk
    so that a loader can check chunks in parallel as it reads them."""
    whole = hashlib.sha256()
    chunks = []
    size = 0
    for count, digest in chunk_digests(path, CHUNK, whole):
        chunks.append(digest)
        size += count
    return {"size": size, "sha256": whole.hexdigest(), "chunk_size": CHUNK, "chunks": chunks}


def chunk_digests(path: str, chunk_size: int, whole: Any = None) -> Iterator[tuple[int, str]]:
    """(bytes, sha256 hex) of each `chunk_size`-byte chunk of the file, in order, hashed a
    PIECE at a time so that one piece is all it holds in memory; `whole`, a hashlib object,
    also gets every byte."""
    piece = memoryview(bytearray(PIECE))
    with open(path, "rb", buffering=0) as handle:
        while True:
            digest, filled = hashlib.sha256(), 0
            while filled < chunk_size:
                count = handle.readinto(piece[: min(PIECE, chunk_size - filled)])
                if not count:
                    break
                digest.update(piece[:count])
                if whole is not None:
                    whole.update(piece[:count])
                filled += count
            if not filled:
                return
            yield filled, digest.hexdigest()
            if filled < chunk_size:
                return
