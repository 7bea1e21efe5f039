"""Where a program's weights lie on disk: files, each tensor's range in one, and where a
buffer that a Load of a range writes sits in its 4 KiB."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import core

# A buffer a Load writes agrees with its file offset modulo 4 KiB (on a 4 KiB boundary for
# the artifact and cache files, which align their large tensors so; at the same phase for a
# checkpoint's), so that the read's aligned middle skips the page cache (O_DIRECT).
LOAD_ALIGNMENT = 4096

# How long a file must be unchanged before its identity vouches for its bytes (file times
# can be as coarse as that: common/file_identity.h).
SETTLED_NS = core.SETTLED_NANOSECONDS


@dataclass(frozen=True)
class WeightRange:
    """Where a bound tensor's bytes are on disk."""

    offset: int  # absolute, in the file
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    crc32c: int = -1  # the range's own checksum, checked by its loads (RangeTrust says when); -1: none recorded
    file: int = 0  # index in WeightsOnDisk.files


@dataclass(frozen=True)
class WeightFile:
    """One file weights are read from, with the chunk digests that verify it whole."""

    path: str  # absolute
    size: int
    chunk_bytes: int = 0  # 0: no digests
    chunk_sha256: tuple[str, ...] = ()
    # core.FileIdentity of the file when it was read whole and found as its ranges' checksums
    # say: a load finding it so skips its CRC-32C pass. None: loads check until one finds
    # its bytes good in a settled file (RangeTrust in storage/io_engine.h).
    verified_as: Any = None


def identity_if_intact(path: str, before: Any) -> Any:
    """`path`'s identity if it is still `before` (taken before the file was read whole), so
    nothing wrote it meanwhile, and its last change is over SETTLED_NS old; else None."""
    after = core.file_identity(path)
    return after if after == before and core.identity_settled(after, SETTLED_NS) else None


@dataclass(frozen=True)
class WeightsOnDisk:
    """Where the bound tensors that live on disk are: an artifact's or the weights cache's
    one file, or a checkpoint's shards. Bound slots absent from `ranges` stay the
    program's own tensors in RAM (a buffer computed at compile time, say)."""

    files: tuple[WeightFile, ...]
    ranges: dict[int, WeightRange]  # bound slot -> its bytes

    @property
    def nbytes(self) -> int:
        return sum(place.nbytes for place in self.ranges.values())

    def path_of(self, place: WeightRange) -> str:
        return self.files[place.file].path


def load_phase(place: WeightRange) -> int:
    """Where in its 4 KiB a buffer that a Load of `place` writes starts: as the file offset
    does, unless that would misalign the tensor's elements (then the read is buffered)."""
    phase = place.offset % LOAD_ALIGNMENT
    return phase if phase % place.dtype.itemsize == 0 else 0
